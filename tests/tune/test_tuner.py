"""The study loop against a fake backend whose answer is known: strategies, failures as
results, budget, resume after a kill, picks and confirmation."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweetspot._errors import SweetspotError
from sweetspot.backends.base import MemoryPeaks, Run, ServerFacts
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.confirm import welch_interval
from sweetspot.tune.evaluate import Evaluator, parse_slos
from sweetspot.tune.picks import choose_picks, pareto_front, pareto_numbers
from sweetspot.tune.result import TrialResult
from sweetspot.tune.space import Dimension, SearchSpace
from sweetspot.tune.store import StudyStore
from sweetspot.tune.tuner import Budget, Tuner, make_sampler
from tests.backends import fake

GiB = 2**30
WORKLOAD = validate_workload({"name": "w", "prompt": {"kind": "fixed", "value": 8},
                              "output": {"kind": "fixed", "value": 10},
                              "arrival": {"process": "inf"}}, "test")
SPACE = SearchSpace((Dimension("max_num_seqs", (16, 32, 64, 128, 256)),
                     Dimension("gpu_memory_utilization", (0.8, 0.9, 0.95)),
                     Dimension("enable_prefix_caching", (False, True))))


class FakeBackend(fake.FakeBackend):
    """Each request takes 1 s per token divided by a speed: speed grows with max-num-seqs up to
    128, prefix caching adds 10 %; utilisation 0.95 with 256 sequences is an OOM."""

    def __init__(self, interrupt_on: int | None = None):
        self.calls = 0
        self.interrupt_on = interrupt_on

    def start(self, config: ServingConfig) -> tuple[str, str] | None:
        self.calls += 1
        if self.interrupt_on is not None and self.calls == self.interrupt_on:
            raise KeyboardInterrupt
        if config.gpu_memory_utilization == 0.95 and config.max_num_seqs == 256:
            return "oom", "CUDA out of memory"
        return None

    def facts(self, config: ServingConfig) -> ServerFacts:
        return ServerFacts(memory=MemoryPeaks(
            None, int(config.gpu_memory_utilization * 80 * GiB), None, None, 1))

    def counters(self, config: ServingConfig) -> dict:
        return {"mean_batch": float(min(config.max_num_seqs, 100))}

    def answer(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig,
               index: int) -> Run:
        speed = min(config.max_num_seqs, 128) * (1.1 if config.enable_prefix_caching else 1.0)
        records = []
        for r in requests:
            step = 1.0 / speed
            chunks = tuple(step * (i + 1) for i in range(r.output_tokens))
            records.append(RequestRecord(r.request_id, 0.0, 0.0, chunks, chunks[-1],
                                         r.prompt_tokens, r.output_tokens, 0, None, None))
        return Run(tuple(records), max(c.end_s for c in records))


def _tuner(tmp_path: Path, backend: FakeBackend, *, budget: int, resume: bool = False,
           strategy_seed: int = 0, slos: str | None = None, joins: bool = False) -> Tuner:
    store = StudyStore.open(f"sqlite:///{tmp_path / 's.db'}", "study", SPACE,
                            resume=resume or joins,
                            sampler=make_sampler("throughput", strategy_seed))
    evaluator = Evaluator(backend, WORKLOAD, 20, parse_slos(slos), vocab_size=100)
    baseline = ServingConfig(max_num_seqs=32, gpu_memory_utilization=0.9,
                             enable_prefix_caching=False)
    return Tuner(store, evaluator, SPACE, baseline, budget=Budget(trials=budget),
                 count_stored=not joins)


def test_ofat_sweeps_each_knob_from_the_baseline_then_combines(tmp_path: Path) -> None:
    backend = FakeBackend()
    tuner = _tuner(tmp_path, backend, budget=100)
    tuner.run_ofat()
    rows = tuner.ordered_rows()
    assert [r.phase for r in rows[:1]] == ["baseline"]
    ofat = [r for r in rows if r.phase == "ofat"]
    assert len(ofat) == 4 + 2 + 1  # every other value of each knob, one knob at a time
    for row in ofat:  # the other knobs keep the baseline's values
        changed = [k for k, v in row.config.items() if v != rows[0].config[k]]
        assert changed == [row.knob]
    combined = rows[-1]
    assert combined.phase == "combined"
    assert combined.config["max_num_seqs"] == 128  # the first value at the ceiling
    assert combined.config["enable_prefix_caching"] is True
    assert backend.calls == len(rows) == 9


def test_failed_trial_is_a_result(tmp_path: Path) -> None:
    tuner = _tuner(tmp_path, FakeBackend(), budget=200)
    tuner.run_grid()
    rows = tuner.ordered_rows()
    assert len(rows) == SPACE.size == 30
    oom = [r for r in rows if r.status == "oom"]
    assert len(oom) == 2 and all(r.cause == "CUDA out of memory" for r in oom)
    assert all(not r.slo_ok and r.metrics == {} for r in oom)


def test_two_tuners_split_one_grid(tmp_path: Path) -> None:
    """Two tuners on one SQLite file, at once, with budgets that together cover the grid:
    GridSampler reads the storage, so each runs points the other has not taken: every point
    runs exactly once, each tuner spends its whole budget, and no trial was a repeat or
    yielded to the other's (the study holds one complete trial per point, nothing else),
    where two tuners walking one seeded shuffle would each wait on the other's trials."""
    _tuner(tmp_path, FakeBackend(), budget=0)  # creates the study
    backends = [FakeBackend(), FakeBackend()]
    tuners = [_tuner(tmp_path, b, budget=SPACE.size // 2, joins=True) for b in backends]
    start, errors = threading.Barrier(2), []

    def run(tuner: Tuner) -> None:
        start.wait()
        try:
            tuner.run("grid")
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in tuners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert [b.calls for b in backends] == [t.ran for t in tuners] == [15, 15]
    rows = tuners[0].store.rows()
    configs = {json.dumps(dict(r.config), sort_keys=True) for r in rows}
    assert len(configs) == len(rows) == SPACE.size
    trials = tuners[0].store.study.get_trials()
    assert len(trials) == SPACE.size and {t.state for t in trials} == {TrialState.COMPLETE}
    assert sorted(t.system_attrs["grid_id"] for t in trials) == list(range(SPACE.size))


def test_grid_runs_a_point_whose_trial_failed(tmp_path: Path) -> None:
    """Every grid point's trial failed (its process lost, say): GridSampler counts them all
    visited; the tuner runs them anyway, by label, and ends when the study holds every one
    (not on the sampler's repeats of visited points)."""
    tuner = _tuner(tmp_path, FakeBackend(), budget=100)
    study = tuner.store.study
    grid = optuna.samplers.GridSampler({d.knob: list(d.labels) for d in SPACE.dimensions})
    for _ in range(SPACE.size):
        study.tell(tuner.store.ask(sampler=grid), state=TrialState.FAIL)
    assert grid.is_exhausted(study)
    backend = FakeBackend()
    tuner = _tuner(tmp_path, backend, budget=100, resume=True)
    tuner.run("grid")
    assert backend.calls == len(tuner.rows) == SPACE.size
    tuner.run("grid")  # done: nothing more runs, nothing more is asked
    assert backend.calls == SPACE.size and len(study.get_trials()) == 2 * SPACE.size


def test_grid_points_already_stored_run_nothing(tmp_path: Path) -> None:
    """The baseline run before the grid (fixed labels, no grid point of its own) is a point
    the grid proposes later: told as a duplicate, it runs nothing and costs no budget."""
    backend = FakeBackend()
    tuner = _tuner(tmp_path, backend, budget=SPACE.size)
    tuner.evaluate(tuner.baseline, "baseline")
    tuner.run("grid")
    assert backend.calls == len(tuner.rows) == SPACE.size
    assert len([r for r in tuner.ordered_rows() if r.phase == "baseline"]) == 1


def test_optuna_finds_the_best_within_a_third_of_the_grid(tmp_path: Path) -> None:
    tuner = _tuner(tmp_path, FakeBackend(), budget=10)
    tuner.run("auto")
    best = tuner.best()
    # the best throughput of the space: 128+ sequences, prefix caching on (+10 %)
    assert best.config["max_num_seqs"] >= 128 and best.config["enable_prefix_caching"]
    assert len(tuner.rows) == 10


def test_resume_after_a_kill_loses_only_the_trial_in_flight(tmp_path: Path) -> None:
    first = FakeBackend(interrupt_on=4)
    with pytest.raises(KeyboardInterrupt):
        _tuner(tmp_path, first, budget=8).run("ofat")
    backend = FakeBackend()
    tuner = _tuner(tmp_path, backend, budget=8, resume=True)
    assert len(tuner.rows) == 3  # three finished before the kill
    tuner.run("ofat")
    assert len(tuner.rows) == 8
    assert backend.calls == 5  # the interrupted one again, and four more
    numbers = [r.number for r in tuner.ordered_rows()]
    assert numbers[:3] == [0, 1, 2] and 3 not in numbers  # trial 3 is the failed, lost one


def test_study_names_are_checked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    StudyStore.open(url, "a", SPACE, resume=False)
    with pytest.raises(SweetspotError, match="already exists"):
        StudyStore.open(url, "a", SPACE, resume=False)
    with pytest.raises(SweetspotError, match="no study named 'b'"):
        StudyStore.open(url, "b", SPACE, resume=True)
    with pytest.raises(SweetspotError, match="cannot open the study storage"):
        StudyStore.open("postgresql://nobody@127.0.0.1:1/x", "a", SPACE, resume=False)


def test_slos_constrain_the_picks(tmp_path: Path) -> None:
    """TPOT = 1000 / speed ms: only max-num-seqs >= 64 with prefix caching meets 15 ms."""
    tuner = _tuner(tmp_path, FakeBackend(), budget=100, slos="p99_tpot=15ms")
    tuner.run_grid()
    rows = tuner.ordered_rows()
    ok = [r for r in rows if r.slo_ok]
    assert ok and all(r.metrics["p99_tpot_ms"] <= 15 for r in ok)
    assert any(r.status == "ok" and not r.slo_ok for r in rows)
    picks = {p.goal: p for p in choose_picks(rows, tuner.baseline_row(), None)}
    assert set(picks) == {"max-throughput", "low-latency", "memory-limited", "balanced"}
    assert picks["memory-limited"].row.config["gpu_memory_utilization"] == 0.8
    assert picks["max-throughput"].gain["output_throughput"] > 2  # 128 x 1.1 vs 32 sequences
    assert any("max_num_seqs: 32 -> " in r for r in picks["max-throughput"].reasons)


def test_overloaded_picks_say_the_most_any_trial_served() -> None:
    """No trial's capacity reaches the offered rate: one max-throughput pick, which says so
    with the best capacity found and its trial; no latency pick is made from latencies
    measured above capacity."""
    def row(n, rps, tp, lat, over):
        return TrialResult(number=n, status="ok", cause=None, slo_ok=not over,
                           config={"max_num_seqs": n}, over_capacity=over, offered_rate=10.0,
                           metrics={"request_throughput": rps, "output_throughput": tp,
                                    "p99_e2el_ms": lat, "p99_ttft_ms": lat,
                                    "p99_tpot_ms": 50.0})
    rows = [row(0, 7.6, 1882.0, 30_000.0, True), row(1, 6.4, 1587.0, 24_500.0, True),
            row(2, 5.0, 1200.0, 40_000.0, True)]
    picks = choose_picks(rows, rows[0], 10.0)
    assert [(p.goal, p.row.number) for p in picks] == [("max-throughput", 0)]
    assert any("offered 10 req/s (the most: 7.60 req/s at steady state, trial 0)" in r
               for r in picks[0].reasons)
    # Short of the rate by less than the resolution: not flagged, but no pick either.
    rows[1] = row(1, 9.8, 2400.0, 900.0, False)
    picks = choose_picks(rows, rows[0], 10.0)
    assert [(p.goal, p.row.number) for p in picks] == [("max-throughput", 1)]
    assert any("the most: 9.80 req/s" in r for r in picks[0].reasons)
    rows[2] = row(2, 11.0, 2500.0, 900.0, False)  # one keeps up: it is every pick
    picks = choose_picks(rows, rows[0], 10.0)
    assert {p.row.number for p in picks} == {2}
    assert not any("the most:" in r for p in picks for r in p.reasons)


def test_a_pick_changes_the_baseline_only_beyond_the_resolution() -> None:
    """Within the resolution of the best, the fewest changes win: the baseline itself, or a
    configuration that leaves a useless knob at the user's value (and says so)."""
    def row(n, config, tp, ttft):
        return TrialResult(number=n, status="ok", cause=None, slo_ok=True, config=config,
                           phase="ofat", knob=next(iter(config)), memory_bytes=10 * 2**30,
                           metrics={"output_throughput": tp, "p99_ttft_ms": ttft,
                                    "p99_tpot_ms": 20.0, "request_throughput": tp / 100})
    base = {"max_num_seqs": 256, "max_model_len": 8192}
    rows = [row(0, base, 1000.0, 400.0),
            row(1, {**base, "max_model_len": 4096}, 1010.0, 400.0),  # +1 %: noise
            row(2, {"max_num_seqs": 512, "max_model_len": 4096}, 1300.0, 400.0),
            row(3, {"max_num_seqs": 512, "max_model_len": 8192}, 1290.0, 350.0)]
    picks = {p.goal: p for p in choose_picks(rows, rows[0], None, resolution=0.02)}
    assert picks["max-throughput"].row.number == 3  # 1290 is within 2 % of 1300
    assert any("no measurable gain from max_model_len 4096" in r
               for r in picks["max-throughput"].reasons)
    assert picks["memory-limited"].row.number == 0  # equal memory: keep the baseline
    assert picks["low-latency"].row.number == 3
    assert not any("max_model_len" in r for r in picks["low-latency"].reasons)
    picks = {p.goal: p for p in choose_picks(rows[:2], rows[0], None, resolution=0.02)}
    assert picks["max-throughput"].row.number == 0
    assert "nothing measurably better" in " ".join(picks["max-throughput"].reasons)


def test_pareto_front_is_non_dominated() -> None:
    def row(n, tp, lat):
        return TrialResult(config={}, number=n, status="ok", cause=None,
                           metrics={"output_throughput": tp, "p99_e2el_ms": lat})
    rows = [row(0, 100, 50), row(1, 200, 80), row(2, 150, 90), row(3, 300, 200),
            row(4, 90, 40)]
    assert [r.number for r in pareto_front(rows)] == [4, 0, 1, 3]


def test_duplicates_of_trial_0_are_counted_once(tmp_path: Path) -> None:
    """The sampler proposing the baseline (trial 0) again adds no row: a budget of N trials
    reports N, not N + 1."""
    tuner = _tuner(tmp_path, FakeBackend(), budget=1)
    tuner.run("ofat")
    first = tuner.rows[next(iter(tuner.rows))]
    assert first.number == 0
    trial = tuner.store.ask()
    tuner.store.tell(trial, dataclasses.replace(first, duplicate_of=0), (1.0,), {"ran": 0.0})
    assert [r.number for r in tuner.store.rows()] == [0]


def test_welch_interval() -> None:
    diff, low, high = welch_interval([10.0, 11.0, 12.0], [5.0, 6.0, 7.0])
    assert diff == 5.0 and 0 < low < 5 < high
    _, low, high = welch_interval([10.0, 12.0, 8.0], [11.0, 9.0, 10.0])
    assert low < 0 < high


@pytest.mark.parametrize(("text", "error"), [
    ("p99_ttft=300", None), ("ttft=2s", None), ("p99_latency=3s", "bad SLO"),
    ("p99_ttft=fast", "a time"), ("p99_ttft=-1ms", "positive")])
def test_parse_slos(text: str, error: str | None) -> None:
    if error is None:
        assert next(iter(parse_slos(text).values())) in (300.0, 2000.0)
    else:
        with pytest.raises(SweetspotError, match=error):
            parse_slos(text)


def test_pareto_numbers_are_non_dominated_by_throughput_ascending():
    points = [(0, 1000, 8000), (1, 800, 6000), (2, 1200, 9000), (3, 1300, 7000),
              (4, 500, 6000), (5, 1300, 7500), (6, 700, 5000)]
    assert pareto_numbers(points) == (6, 1, 3)
    assert pareto_numbers([]) == ()
    assert pareto_numbers([(9, 1.0, 1.0), (4, 1.0, 1.0)]) == (4,)


def test_rivals_are_the_trials_the_intervals_cannot_separate() -> None:
    """Steps ±10 %: throughputs within a factor 1.1^2 = 1.21 of the pick overlap it."""
    from sweetspot.tune.picks import rivals

    def row(n, seqs, tp, ttft):
        return TrialResult(number=n, status="ok", cause=None, slo_ok=True,
                           config={"max_num_seqs": seqs}, phase="ofat", knob="max_num_seqs",
                           memory_bytes=10 * 2**30,
                           metrics={"output_throughput": tp, "p99_ttft_ms": ttft,
                                    "p99_tpot_ms": 20.0, "request_throughput": tp / 100})
    rows = [row(0, 64, 1000.0, 300.0), row(1, 128, 1150.0, 320.0),
            row(2, 256, 1300.0, 400.0), row(3, 512, 1300.0, 400.0),
            row(4, 1024, 1100.0, 900.0), row(5, 32, 600.0, 250.0)]
    rows[3] = dataclasses.replace(rows[3], metrics=dict(rows[2].metrics))  # same numbers
    picks = {p.goal: p for p in choose_picks(rows, rows[0], None, resolution=0.02)}
    assert picks["max-throughput"].row.number == 2
    near = rivals(picks["max-throughput"], rows, None, 0.10)
    assert [r.number for r in near] == [1, 4]  # 1150 and 1100 >= 1300 / 1.21; 1000 is not
    assert rivals(picks["max-throughput"], rows, None, 0.0) == []
    assert rivals(picks["memory-limited"], rows, None, 0.10) == []  # the memory model's


def test_a_simulated_study_names_its_picks_rivals(tmp_path: Path) -> None:
    from sweetspot.tune.result import StudyResult
    from sweetspot.tune.study import run_study
    from tests.tune.executors.conftest import tune_settings_of

    settings = tune_settings_of(model="qwen2.5-0.5b", gpu="l4", workload="short",
                                num_requests=64, confirm=0, seed=3, trials=16,
                                study_name="r").study
    data = run_study(settings, f"sqlite:///{tmp_path / 's.db'}", resume=False)
    assert isinstance(data, StudyResult)
    best = next(p for p in data.picks if p.goal == "max-throughput")
    assert best.rivals, "a 25 % band (an unmeasured pair) holds some trial of the sweep"
    by_number = {t.number: t for t in data.trials}
    for number in best.rivals:
        assert by_number[number].throughput * 1.25 ** 2 >= by_number[best.trial].throughput
    assert any("within the simulator's uncertainty (steps ±25%" in r for r in best.reasons)
