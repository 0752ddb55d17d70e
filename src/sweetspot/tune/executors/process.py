"""``--executor process``: simulated trials on every core of this machine.

A pool of worker processes (spawned: a fork would copy the study's threads and open storage
connections), each building the study's evaluator once (``evaluate_job``). The simulator is
deterministic, so a trial's row does not depend on which worker ran it. A worker that dies
(killed, out of memory) breaks the pool: its jobs fail with ``WorkerLost`` and the pool is
started again for the retry.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from sweetspot.tune.executors.base import Job, chained, evaluate_job
from sweetspot.tune.result import TrialResult
from sweetspot.tune.settings import StudySettings

__all__ = ["ProcessExecutor", "default_workers"]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group: the study stops its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProcessExecutor:
    name = "process"

    def __init__(self, settings: StudySettings, workers: int | None = None) -> None:
        self.settings = settings
        self.slots = workers or default_workers()
        self._pool: ProcessPoolExecutor | None = None

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.slots, mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_interrupts)
        return self._pool

    def submit(self, job: Job) -> Future[TrialResult]:
        try:
            inner = self._started().submit(evaluate_job, self.settings, job)
        except BrokenProcessPool:  # a worker died since: a new pool for this and later jobs
            self._stop(wait=False)
            inner = self._started().submit(evaluate_job, self.settings, job)
        return chained(job, inner, (BrokenProcessPool,))

    def _stop(self, *, wait: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not wait:  # abandon running jobs: their workers are stopped, not waited for
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self._stop(wait=False)
