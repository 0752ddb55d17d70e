"""The seam between a study's loop and where its trials run.

An executor takes a ``Job`` (one configuration at the study's offered rate) and returns a
``concurrent.futures.Future`` of its ``TrialResult``; it runs ``slots`` jobs at once. The loop
(``tune.tuner``) never waits on a particular executor's timing: it tells Optuna the results in
the order it asked for them, so a study is a function of its seed, its sampler and how many
trials it keeps in flight (``--in-flight``), not of the executor or of which trial finished
first. ``local`` runs each job in this process when it is submitted; ``process`` and ``ray``
run them elsewhere, where each worker process builds the study's evaluator once from the
settings (``evaluate_job``) — an evaluator holds a backend and closures, the settings are plain
data.

A worker that is lost (its process killed, its node gone) fails the future with
``WorkerLost``; the loop runs the job once more and then records the trial failed with that
cause. Any other exception is the trial's own failure and is recorded as a crash.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sweetspot.tune.result import TrialResult

if TYPE_CHECKING:
    from sweetspot.tune.evaluate import Evaluator
    from sweetspot.tune.settings import StudySettings

__all__ = ["Executor", "Job", "LocalExecutor", "WorkerLost", "chained", "evaluate_job",
           "failed_row"]


@dataclass(frozen=True, slots=True)
class Job:
    """One trial to run: a configuration (explicit settings, JSON) at the offered rate."""

    config: dict[str, Any]
    rate: float | None  # the study's offered req/s (None: the workload's own)
    repeat: int = 0  # another draw of the requests (confirmation's repeats)


class WorkerLost(Exception):
    """The process or node running a job went away before it answered."""


class Executor(Protocol):
    name: str
    slots: int  # jobs it runs at once

    def submit(self, job: Job) -> Future[TrialResult]: ...

    def close(self) -> None:
        """Stop every worker it started (jobs still running are abandoned)."""


def failed_row(job: Job, status: str, cause: str) -> TrialResult:
    """The row of a job that produced no result of its own (its worker lost, an error)."""
    return TrialResult(config=job.config, status=status, cause=cause, offered_rate=job.rate)


class LocalExecutor:
    """Each job runs here, in the study's own evaluator, as it is submitted: one at a time."""

    name = "local"
    slots = 1

    def __init__(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator

    def submit(self, job: Job) -> Future[TrialResult]:
        from sweetspot.tune.tuner import config_from_json

        future: Future[TrialResult] = Future()
        self.evaluator.rate = job.rate
        result, _ = self.evaluator.evaluate(config_from_json(job.config), repeat=job.repeat)
        future.set_result(result)
        return future

    def close(self) -> None:
        return None


# A worker process's evaluators, by the settings they were built from (one study at a time in
# practice; a Ray worker process may serve several studies' tasks over its life).
_EVALUATORS: dict[str, Evaluator] = {}


def _evaluator(settings: StudySettings) -> Evaluator:
    """This worker process's evaluator of ``settings`` (built once per process)."""
    from sweetspot.tune.study import study_evaluator

    key = json.dumps(settings.to_dict(), sort_keys=True, default=str)
    evaluator = _EVALUATORS.get(key)
    if evaluator is None:
        evaluator = _EVALUATORS[key] = study_evaluator(settings)
    return evaluator


def evaluate_job(settings: StudySettings, job: Job) -> dict[str, Any]:
    """Run ``job`` in a worker process with the evaluator ``settings`` define; the row as
    JSON (a ``TrialResult``'s mappings are read-only views, which do not pickle)."""
    from sweetspot.tune.tuner import config_from_json

    evaluator = _evaluator(settings)
    evaluator.rate = job.rate
    result, _ = evaluator.evaluate(config_from_json(job.config), repeat=job.repeat)
    return result.to_dict()


def pairs_job(settings: StudySettings, configs: list[dict[str, Any]], repeats: int,
              rate: float | None) -> list[list[float]]:
    """The finalists' confirmation repeats (``confirm.repeat_pairs``), all in this worker
    process: A and B interleaved on one machine, so its drift falls on both."""
    from sweetspot.tune.confirm import repeat_pairs
    from sweetspot.tune.tuner import config_from_json

    evaluator = _evaluator(settings)
    evaluator.rate = rate
    return repeat_pairs(evaluator, [config_from_json(c) for c in configs], repeats)


def chained(job: Job, inner: Future[Any], lost: tuple[type[BaseException], ...]
            ) -> Future[TrialResult]:
    """A future of ``job``'s row from a remote future of its JSON (``evaluate_job``): an
    exception of a ``lost`` type becomes ``WorkerLost``, any other the trial's crash."""
    outer: Future[TrialResult] = Future()

    def done(future: Future[Any]) -> None:
        try:
            data = future.result()
        except lost as exc:
            outer.set_exception(WorkerLost(_first_line(exc)))
        except Exception as exc:  # the trial's own error, raised in the worker
            outer.set_result(failed_row(job, "crash", _first_line(exc)))
        else:
            outer.set_result(TrialResult.from_dict(data))

    inner.add_done_callback(done)
    return outer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
