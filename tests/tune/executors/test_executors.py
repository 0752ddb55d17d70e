"""Trials in flight and the executors that run them: a study is a function of its seed, sampler
and --in-flight, not of the executor; the budget is exact; a lost worker's trial runs once
more, then is recorded failed; an interrupted study leaves no trial RUNNING."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.evaluate import Evaluator, parse_slos
from sweetspot.tune.executors import Execution, Job, LocalExecutor, WorkerLost
from sweetspot.tune.result import TrialResult
from sweetspot.tune.store import StudyStore
from sweetspot.tune.tuner import Budget, Tuner, make_sampler
from tests.tune.executors.conftest import tune_settings_of
from tests.tune.test_tuner import SPACE, WORKLOAD, FakeBackend

BASELINE = ServingConfig(max_num_seqs=32, gpu_memory_utilization=0.9,
                         enable_prefix_caching=False)


def _tuner(url: str, *, budget: int, in_flight: int, executor=None, seed: int = 0) -> Tuner:
    store = StudyStore.open(url, "study", SPACE, resume=False,
                            sampler=make_sampler("throughput", seed))
    evaluator = Evaluator(FakeBackend(), WORKLOAD, 20, parse_slos(None), vocab_size=100)
    return Tuner(store, evaluator, SPACE, BASELINE, budget=Budget(trials=budget), seed=seed,
                 executor=executor or LocalExecutor(evaluator), in_flight=in_flight)


class Deferred(LocalExecutor):
    """Runs each job when its result is asked for, latest first where several wait: a pool
    whose trials finish in another order than they were asked."""

    slots = 8

    def __init__(self, evaluator: Evaluator) -> None:
        super().__init__(evaluator)
        self.waiting: list[tuple[Job, Future]] = []
        self.submitted: list[dict] = []

    def submit(self, job: Job) -> Future[TrialResult]:
        self.submitted.append(job.config)
        future: Future[TrialResult] = Future()
        self.waiting.append((job, future))
        original = future.result

        def result(timeout=None):
            for waiting_job, waiting in reversed(self.waiting):  # the newest finishes first
                if not waiting.done():
                    waiting.set_result(LocalExecutor.submit(self, waiting_job).result())
            return original(timeout)

        future.result = result  # type: ignore[method-assign]
        return future


def _trials(tuner: Tuner) -> list[tuple[int, dict, str]]:
    return [(t.number, t.params, t.state.name)
            for t in tuner.store.study.get_trials(deepcopy=False)]


@pytest.mark.parametrize("strategy", ["auto", "grid"])
def test_the_study_is_the_same_whichever_order_the_trials_finish_in(
        tmp_path: Path, strategy: str) -> None:
    local = _tuner(f"sqlite:///{tmp_path / 'a.db'}", budget=20, in_flight=4)
    local.run(strategy)
    deferred = _tuner(f"sqlite:///{tmp_path / 'b.db'}", budget=20, in_flight=4)
    deferred.executor = Deferred(deferred.evaluator)
    deferred.run(strategy)
    assert _trials(local) == _trials(deferred)
    assert len(local.rows) == local.ran == 20  # the budget, exactly
    assert len({t.number for t in local.rows.values()}) == 20  # no configuration twice


def test_in_flight_trials_are_running_in_the_storage_until_told(tmp_path: Path) -> None:
    tuner = _tuner(f"sqlite:///{tmp_path / 's.db'}", budget=12, in_flight=4)
    tuner.executor = Deferred(tuner.evaluator)
    seen: list[int] = []
    tuner.on_trial = lambda row, best: seen.append(sum(
        t.state == TrialState.RUNNING for t in tuner.store.study.get_trials(deepcopy=False)))
    tuner.run("optuna")
    assert max(seen) == 3  # as each is told, the three asked after it still run
    assert not any(t.state == TrialState.RUNNING
                   for t in tuner.store.study.get_trials(deepcopy=False))


class Losing(LocalExecutor):
    """Loses the worker of the first ``losses`` submissions of max-num-seqs 64."""

    def __init__(self, evaluator: Evaluator, losses: int) -> None:
        super().__init__(evaluator)
        self.losses = losses
        self.tries = 0

    def submit(self, job: Job) -> Future[TrialResult]:
        if job.config.get("max_num_seqs") == 64:
            self.tries += 1
            if self.tries <= self.losses:
                future: Future[TrialResult] = Future()
                future.set_exception(WorkerLost("NodeDiedError: node 10.0.0.2 died"))
                return future
        return super().submit(job)


@pytest.mark.parametrize(("losses", "status"), [(1, "ok"), (2, "crash")])
def test_a_lost_worker_s_trial_runs_once_more_then_is_recorded_failed(
        tmp_path: Path, losses: int, status: str) -> None:
    tuner = _tuner(f"sqlite:///{tmp_path / 's.db'}", budget=10, in_flight=3)
    tuner.executor = Losing(tuner.evaluator, losses)
    tuner.run("auto")
    row = tuner.rows[next(k for k, r in tuner.rows.items() if r.config["max_num_seqs"] == 64)]
    assert tuner.executor.tries == 2 and row.status == status
    if status == "crash":
        assert row.cause == ("its worker was lost 2 times (last: NodeDiedError: node 10.0.0.2 "
                             "died)")
    assert tuner.ran == 10  # the study went on


def test_an_interrupted_study_fails_every_trial_in_flight(tmp_path: Path) -> None:
    tuner = _tuner(f"sqlite:///{tmp_path / 's.db'}", budget=20, in_flight=4)
    backend = tuner.evaluator.backend
    assert isinstance(backend, FakeBackend)
    backend.interrupt_on = 7
    with pytest.raises(KeyboardInterrupt):
        tuner.run("auto")
    states = [t.state for t in tuner.store.study.get_trials(deepcopy=False)]
    assert TrialState.RUNNING not in states
    assert states.count(TrialState.FAIL) == 4  # the one interrupted and the three before it
    assert states.count(TrialState.COMPLETE) == 3


def test_the_process_pool_gives_the_local_study(tmp_path: Path) -> None:
    """The simulator in worker processes: the same rows, trial for trial, every metric."""
    from sweetspot.tune.study import run_study

    settings = tune_settings_of(trials=16, confirm=0, study_name="s").study
    runs: dict[str, list] = {}
    for name in ("local", "process"):
        data = run_study(settings, f"sqlite:///{tmp_path / (name + '.db')}", resume=False,
                         execution=Execution(name, in_flight=4, workers=2))
        runs[name] = [(t.number, dict(t.config), t.status, t.metrics) for t in data.trials]
        runs[name + " picks"] = [(p.goal, p.trial) for p in data.picks]
    assert runs["local"] == runs["process"]
    assert runs["local picks"] == runs["process picks"]
    assert len(runs["local"]) >= 16


def test_make_sampler_lies_about_running_trials_only() -> None:
    sampler = make_sampler("throughput", 0)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._constant_liar
