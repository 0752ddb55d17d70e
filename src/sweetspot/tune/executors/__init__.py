"""Where a study's trials run (``--executor``): ``local`` (here, one at a time), ``process``
(a pool over this machine's cores: simulated trials) and ``ray`` (Ray tasks on a cluster).
``base`` holds the seam; each executor is a module, imported only when chosen."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweetspot._errors import SweetspotError
from sweetspot.tune.executors.base import Executor, Job, LocalExecutor, WorkerLost

if TYPE_CHECKING:
    from sweetspot.tune.evaluate import Evaluator
    from sweetspot.tune.settings import StudySettings

__all__ = ["EXECUTORS", "Execution", "Executor", "Job", "LocalExecutor", "WorkerLost",
           "default_executor", "open_executor"]

EXECUTORS = ("local", "process", "ray")
# Trials a study keeps in flight on an executor that runs several at once, unless --in-flight
# says: a constant, not the machine's core count, so that a study's trials (the sampler asks
# for the next ones before the last results are told) are the same on any machine.
PARALLEL_IN_FLIGHT = 8


@dataclass(frozen=True, slots=True)
class Execution:
    """How a study's trials run: not part of what the study is (a resumed study, or another
    process serving it, may run its trials elsewhere)."""

    executor: str = "local"
    in_flight: int | None = None  # None: 1 on local, PARALLEL_IN_FLIGHT otherwise
    workers: int | None = None  # process: the pool's size (None: every core)
    ray_address: str | None = None  # ray: "auto", "ray://HOST:PORT"; None starts one here
    emulate_gpus: int | None = None  # ray: simulated trials each hold a fake GPU
    emulate_speedup: float = 50.0  # --emulate-gpus: a real trial's seconds per second held

    @property
    def trials_in_flight(self) -> int:
        if self.in_flight is not None:
            return self.in_flight
        if self.emulate_gpus:  # twice the GPUs: one slow trial told late leaves none idle
            return max(PARALLEL_IN_FLIGHT, 2 * self.emulate_gpus)
        return 1 if self.executor == "local" else PARALLEL_IN_FLIGHT


def default_executor(backend: str) -> str:
    """Simulated trials on every core; real ones one at a time (one GPU, one server)."""
    return "process" if backend == "sim" else "local"


def check_execution(execution: Execution, backend: str) -> None:
    """Refuse what no study runs with (one line each)."""
    if execution.executor not in EXECUTORS:
        raise SweetspotError(f"--executor must be one of {', '.join(EXECUTORS)}, not "
                             f"{execution.executor!r}")
    if execution.in_flight is not None and execution.in_flight < 1:
        raise SweetspotError(f"--in-flight must be at least 1, not {execution.in_flight}")
    if execution.executor == "process" and backend != "sim":
        raise SweetspotError("--executor process runs simulated trials (each real trial "
                             "needs a GPU of its own: --executor ray, or local)")
    if execution.executor != "ray":
        for flag, given in (("--ray-address", execution.ray_address),
                            ("--emulate-gpus", execution.emulate_gpus)):
            if given is not None:
                raise SweetspotError(f"{flag} goes with --executor ray")
    if execution.ray_address is not None:
        from sweetspot.tune.executors.ray import reachable

        reachable(execution.ray_address)
    if execution.emulate_gpus is not None and backend != "sim":
        raise SweetspotError("--emulate-gpus plans simulated trials (--backend sim)")
    if execution.emulate_gpus is not None and execution.emulate_gpus < 1:
        raise SweetspotError(f"--emulate-gpus must be at least 1, not {execution.emulate_gpus}")
    if execution.emulate_speedup <= 0:
        raise SweetspotError("--emulate-speedup must be above 0")


@contextmanager
def open_executor(execution: Execution, settings: StudySettings, evaluator: Evaluator
                  ) -> Iterator[Executor]:
    """The chosen executor, closed (its workers stopped) on the way out, however it ends."""
    executor: Executor
    if execution.executor == "process":
        from sweetspot.tune.executors.process import ProcessExecutor

        executor = ProcessExecutor(settings, execution.workers)
    elif execution.executor == "ray":
        from sweetspot.tune.executors.ray import RayExecutor

        executor = RayExecutor(settings, execution)
    else:
        executor = LocalExecutor(evaluator)
    try:
        yield executor
    finally:
        executor.close()
