"""`calibrate --study`: the simulator fitted on a study's own real trials, each run with its
trial's configuration; and the profile's progress callback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.backends.sim.calibration import PROFILE_WORKLOAD
from sweetspot.backends.sim.cost import LinearStepModel, RooflineModel
from sweetspot.backends.sim.fit import fit_step_model
from sweetspot.metrics.run import measure
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import ArrivalSpec, validate_workload, workload_to_dict
from sweetspot.testing.tiny_model import make_tiny_model
from sweetspot.tune.calibrate import RUNS_PER_ROUND, profile_server, study_observations
from sweetspot.tune.evaluate import Evaluator, config_to_json
from sweetspot.tune.settings import StudySettings
from sweetspot.tune.space import Dimension, SearchSpace
from sweetspot.tune.store import StudyStore
from sweetspot.tune.study import study_data
from tests.conftest import run_cli

# The made-up "real server" (as in tests/backends/sim/test_calibration.py).
TRUTH = LinearStepModel((0.004, 0.0006, 0.00002, 0.00001), 0.05)
SEQS = (8, 32)
NUM_REQUESTS = 48
WORKLOAD = validate_workload({**PROFILE_WORKLOAD,
                              "arrival": {"process": "poisson", "rate": 6}}, "t")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny")).model_dir


def _setup(model_dir: Path, config: ServingConfig | None = None) -> SimSetup:
    arch = load_model(str(model_dir)).arch
    return SimSetup(load_hardware("cpu"), arch, arch.default_quantization(),
                    config or ServingConfig(), Version("0.32.0"), cpu_kvcache_space_bytes=2 * GiB)


def _real_study(model_dir: Path, url: str, name: str = "real", *, runs: bool = True) -> None:
    """A study as `tune --backend vllm` on the CPU build stores it (every server also ran
    with --enforce-eager), whose servers are the made-up one: two trials, max-num-seqs 8 and
    32, each with its capacity and traffic runs."""
    arch = load_model(str(model_dir)).arch
    settings = StudySettings(
        name=name, model=str(model_dir), gpu="cpu", quant=None, vllm_version="0.32.0",
        workload=workload_to_dict(WORKLOAD), num_requests=NUM_REQUESTS, slos={},
        space={"max_num_seqs": [str(s) for s in SEQS]}, baseline={}, seed=5,
        backend="vllm" if runs else "sim",
        vllm={"env": {"VLLM_CPU_KVCACHE_SPACE": "2"}, "args": ["--enforce-eager"]})
    space = SearchSpace((Dimension("max_num_seqs", SEQS),))
    store = StudyStore.open(url, name, space, resume=False,
                            meta={"settings": settings.to_dict()})
    evaluator = Evaluator(SimBackend(_setup(model_dir), TRUTH), WORKLOAD, NUM_REQUESTS, {},
                          vocab_size=min(arch.vocab_size, 32_000), seed=settings.seed)
    for seqs in SEQS:
        config = ServingConfig(max_num_seqs=seqs)
        row, trial = evaluator.evaluate(config.replace(enforce_eager=True))
        # --enforce-eager came from the server options
        row = dataclasses.replace(row, config=config_to_json(config))
        if runs:
            row = dataclasses.replace(row, runs=(
                {"kind": "capacity", "num_requests": NUM_REQUESTS, "rate": None,
                 "max_concurrency": None, "result": measure(trial.run).to_dict()},
                {"kind": "traffic", "num_requests": NUM_REQUESTS, "rate": 6.0,
                 "max_concurrency": None, "result": measure(trial.runs[1]).to_dict()}))
        asked = store.ask({"max_num_seqs": str(seqs)})
        store.tell(asked, row.stored(asked.number, "grid", None), (row.throughput,), {})


def test_calibrate_a_study_fits_every_run_with_its_own_trials_config(
    tiny_dir: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _real_study(tiny_dir, url)
    out = tmp_path / "cal.json"
    done = run_cli("calibrate", "--study", "real", "--storage", url, "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    cal = json.loads(out.read_text())
    # model, GPU and release came from the study's settings
    assert (cal["hardware"], cal["vllm_version"]) == ("cpu", "0.32.0")
    assert cal["fingerprint"]["hidden_size"] == load_model(str(tiny_dir)).arch.hidden_size
    assert {r["run"] for r in cal["fitted_on"]} == {
        f"trial {n} {kind}" for n in (0, 1) for kind in ("capacity", "traffic")}
    errors = {(r["run"], r["metric"]): r["predicted"] / r["measured"] - 1
              for r in cal["fitted_on"]}
    assert max(abs(e) for e in errors.values()) < 0.03, errors
    # The fitted model is the server's: a configuration no trial ran, predicted.
    truth = simulate(_setup(tiny_dir, ServingConfig(max_num_seqs=16, enforce_eager=True)),
                     sample_requests(dataclasses.replace(WORKLOAD,
                                                         arrival=ArrivalSpec(process="inf")),
                                     96, seed=77, vocab_size=4096), model=TRUTH)
    expected = compute_result(truth.records).to_dict()
    predicted = tmp_path / "p.json"
    workload = tmp_path / "wl.json"
    workload.write_text(json.dumps(PROFILE_WORKLOAD))
    sim = run_cli("simulate", "--model", str(tiny_dir), "--gpu", "cpu", "--vllm-version",
                  "0.32.0", "--cpu-kvcache-space", "2", "--set", "max_num_seqs=16", "--set",
                  "enforce_eager=true", "--workload", str(workload), "--num-requests", "96",
                  "--rate", "inf", "--seed", "77", "--calibration", str(out), "--json",
                  str(predicted))
    assert sim.returncode == 0, sim.stderr
    got = json.loads(predicted.read_text())
    for key in ("output_throughput", "median_tpot_ms"):
        assert got[key] == pytest.approx(expected[key], rel=0.05), key


def test_one_config_for_every_run_cannot_fit_the_study(tiny_dir: Path, tmp_path: Path
                                                        ) -> None:
    """The control of the test above: each observation carries its trial's configuration, and
    fitting the same runs as if every server had max-num-seqs 32 misses by far more than 3 %."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    _real_study(tiny_dir, url)
    data = study_data(StudyStore.load(url, "real"), url).to_dict()
    arch = load_model(str(tiny_dir)).arch
    pairs = study_observations(data, min(arch.vocab_size, 32_000),
                               ServingConfig(enforce_eager=True))
    observations = [obs for _, obs in pairs]
    assert {(o.label, o.config.max_num_seqs, o.config.enforce_eager) for o in observations} == {
        ("trial 0 capacity", 8, True), ("trial 0 traffic", 8, True),
        ("trial 1 capacity", 32, True), ("trial 1 traffic", 32, True)}
    setup = _setup(tiny_dir)

    def simulate_run(obs, model):
        return simulate(dataclasses.replace(setup, config=obs.config), obs.requests,
                        max_concurrency=obs.max_concurrency, model=model, trace=True)

    start = RooflineModel(setup.hardware, setup.arch, setup.quant)
    own = fit_step_model(observations, simulate_run, start)
    assert max(abs(p / m - 1) for _, _, m, p in own.rows) < 0.03
    one = [dataclasses.replace(o, config=ServingConfig(max_num_seqs=32, enforce_eager=True))
           for o in observations]
    wrong = fit_step_model(one, simulate_run, start)
    assert max(abs(p / m - 1) for _, _, m, p in wrong.rows) > 0.1


def test_a_study_without_stored_runs_is_one_line_exit_2(tiny_dir: Path, tmp_path: Path
                                                        ) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _real_study(tiny_dir, url, "simulated", runs=False)
    done = run_cli("calibrate", "--study", "simulated", "--storage", url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has no stored runs to calibrate on" in done.stderr and "--backend sim" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    both = run_cli("calibrate", "--study", "simulated", "--storage", url, "--url",
                   "http://127.0.0.1:9")
    assert both.returncode == 2 and "without result JSONs or --url" in both.stderr
    missing = run_cli("calibrate", "--study", "nope", "--storage", url)
    assert missing.returncode == 2 and "no study named 'nope'" in missing.stderr


def test_runs_drawn_otherwise_are_refused_and_failed_runs_left_out() -> None:
    settings = {"workload": workload_to_dict(WORKLOAD), "seed": 5, "backend": "vllm"}
    requests = sample_requests(dataclasses.replace(WORKLOAD, arrival=ArrivalSpec(process="inf")),
                               8, seed=5, vocab_size=4096)
    result = {"duration": 1.0, "failed": 0,
              "total_input_tokens": sum(r.prompt_tokens for r in requests)}
    run = {"kind": "capacity", "num_requests": 8, "rate": None, "max_concurrency": None,
           "result": result}
    row = {"number": 3, "config": {"max_num_seqs": 8}, "runs": [run]}
    data = {"study": "s", "settings": settings, "trials": [row]}
    assert len(study_observations(data, 4096)) == 1
    with pytest.raises(SweetspotError, match="trial 3 capacity: its requests cannot be drawn"):
        study_observations({**data, "settings": {**settings, "seed": 6}}, 4096)
    skipped = []
    failed = {**row, "runs": [{**run, "result": {**result, "failed": 2}}]}
    assert study_observations({**data, "trials": [failed]}, 4096,
                              on_skip=lambda label, why: skipped.append((label, why))) == []
    assert skipped == [("trial 3 capacity", "2 requests failed")]


def test_the_profile_reports_each_run_as_it_starts() -> None:
    from sweetspot.testing.mock_server import MockServerConfig, start_mock_server

    wl = validate_workload({"name": "short", "prompt": {"kind": "fixed", "value": 16},
                            "output": {"kind": "fixed", "value": 8}}, "t")
    seen: list[tuple[str, int, int]] = []
    with start_mock_server(MockServerConfig(ttft_s=0.002, itl_s=0.001)) as url:
        runs = profile_server(url, 8, 4096, workload=wl, rounds=2,
                              on_run=lambda *args: seen.append(args))
    total = 2 * RUNS_PER_ROUND
    assert len(runs) == total
    assert [done for _, done, _ in seen] == list(range(total))
    assert {of for _, _, of in seen} == {total}
    assert [f"{url} {label}" for label, _, _ in seen] == [label for label, _ in runs]
