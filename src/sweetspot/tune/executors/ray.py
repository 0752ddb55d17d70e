"""``--executor ray``: each trial a Ray task that asks for what its configuration needs.

A real trial (``--backend vllm``) asks for tensor-parallel × pipeline-parallel GPUs and one
CPU, so Ray packs trials onto the free GPUs of every node; a simulated one asks for one CPU.
Each worker process builds the study's evaluator once (``base.evaluate_job``): every node needs
sweetspot installed, and the model and workload files where the settings name them.
``--ray-address`` joins a running cluster (``auto``: the one this machine belongs to;
``ray://HOST:PORT``: Ray Client); without it Ray starts on this machine for the study and stops
with it.

Ray's own retries are off (``max_retries=0``): a task whose worker process or node dies fails
with Ray's error, which becomes ``WorkerLost`` and the study's loop runs it once more
(``tune.tuner``), the same rule on every executor. ``--emulate-gpus`` is ``emulate.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.evaluate import config_to_json
from sweetspot.tune.executors import Execution
from sweetspot.tune.executors.base import Job, WorkerLost, chained, evaluate_job, pairs_job
from sweetspot.tune.executors.emulate import EMULATED_GPU, hold, simulate
from sweetspot.tune.result import TrialResult
from sweetspot.tune.settings import StudySettings

__all__ = ["RayExecutor", "gpus_of", "reachable"]


def gpus_of(config: dict[str, Any]) -> int:
    """GPUs a configuration's server holds."""
    return (int(config.get("tensor_parallel_size") or 1)
            * int(config.get("pipeline_parallel_size") or 1))


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors for a task whose worker or node went away (not the task's own error)."""
    import ray.exceptions as rex

    # OutOfMemoryError: Ray's memory monitor killed the worker (the host ran short, which on a
    # shared machine is seldom the trial's own doing)
    names = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError",
             "ActorDiedError", "OwnerDiedError", "ObjectLostError", "RaySystemError",
             "TaskUnschedulableError", "OutOfMemoryError")
    return tuple(getattr(rex, n) for n in names if hasattr(rex, n))


def reachable(address: str) -> None:
    """Refuse, in one line, an address Ray would spend minutes retrying: not ``auto``,
    ``HOST:PORT`` or ``ray://HOST:PORT``, or nothing answering there."""
    if address == "auto":
        return
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if "://" in rest or not host or not port.isdigit():
        raise SweetspotError(f"--ray-address {address}: cannot connect to Ray (give auto, "
                             "HOST:PORT or ray://HOST:PORT)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise SweetspotError(f"--ray-address {address}: cannot connect to Ray "
                             f"({exc.strerror or exc})") from None


def connect(address: str | None, **local: Any) -> bool:
    """Ray, connected: to ``address``, or started here (``local``: ``ray.init``'s resources).
    True when this call started it (and ``shutdown`` should stop it)."""
    try:
        import ray
    except ImportError:
        raise SweetspotError("--executor ray needs Ray: pip install 'vllm-sweetspot[ray]'"
                             ) from None
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if address is not None:
        reachable(address)
    try:
        if address is None:
            ray.init(include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False, configure_logging=False, **local)
        else:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                     configure_logging=False)
    except Exception as exc:  # Ray's: no cluster at that address, a bad scheme, a timeout
        text = str(exc).strip().splitlines()
        raise SweetspotError(f"--ray-address {address}: cannot connect to Ray "
                             f"({text[0] if text else type(exc).__name__})") from None
    return True


class RayExecutor:
    name = "ray"

    def __init__(self, settings: StudySettings, execution: Execution) -> None:
        import ray

        self.settings = settings
        self.emulated = execution.emulate_gpus
        self.speedup = execution.emulate_speedup
        local = {"resources": {EMULATED_GPU: self.emulated}} if self.emulated else {}
        self._started = connect(execution.ray_address, **local)
        self._real = settings.backend != "sim"
        resources = ray.cluster_resources()
        unit = EMULATED_GPU if self.emulated else "GPU" if self._real else "CPU"
        if self.emulated and resources.get(EMULATED_GPU, 0) < 1:
            raise SweetspotError(f"--emulate-gpus: the Ray cluster at {execution.ray_address} "
                                 f"has no {EMULATED_GPU} resources (ray start --resources "
                                 f"'{{\"{EMULATED_GPU}\": N}}' on its nodes)")
        self.slots = max(1, int(resources.get(unit, 1)))
        # The settings go with every task, by value (a few kB, inlined in the task): an object
        # put here would be fetched from this process, and a worker that cannot reach it under
        # load fails its task with OwnerDiedError (CI: a trial lost twice that way).
        self._task = ray.remote(max_retries=0)(evaluate_job)
        self._pairs = ray.remote(max_retries=0)(pairs_job)
        self._simulate = ray.remote(max_retries=0, num_cpus=1)(simulate)
        self._hold = ray.remote(max_retries=0, num_cpus=0)(hold)
        if self.emulated:
            self._warm_up(ray, resources)
        self._first_s: float | None = None
        self._last_s = 0.0
        self._emulated_s = 0.0  # GPU seconds of the trials finished
        self._overrun_s = 0.0  # holds lengthened by a simulation that came late
        self._trials = 0
        self._search: tuple[float, float, int] | None = None  # its end, trial s, trials
        self._lost = _lost_errors()
        self._running: dict[Any, None] = {}  # object refs of jobs not yet finished
        self.lost = 0  # jobs whose worker or node went away

    def _warm_up(self, ray: Any, resources: dict[str, float]) -> None:
        """Start the worker processes before the makespan's clock does: a hold for every
        emulated GPU and a simulation (of the baseline) for every CPU. A real trial's minutes
        hide Ray's process starts; held for seconds, the emulated ones would not."""
        job = Job(dict(self.settings.baseline), None)
        done = ray.put(({}, 0.0))
        holds = [self._hold.options(resources={EMULATED_GPU: 1}).remote([done], 1, 1.0)
                 for _ in range(int(resources.get(EMULATED_GPU, 0)))]
        sims = [self._simulate.remote(self.settings, job, 1)
                for _ in range(int(resources.get("CPU", 1)))]
        ray.get(holds + sims)

    def submit(self, job: Job) -> Future[TrialResult]:
        if self._first_s is None:
            self._first_s = time.monotonic()
        if self.emulated:
            gpus = gpus_of(job.config)
            simulated = self._simulate.remote(self.settings, job, gpus)
            ref = self._hold.options(resources={EMULATED_GPU: gpus}).remote(
                [simulated], gpus, self.speedup)
        else:
            # spread over the nodes: a trial per node's free CPU or GPUs, not the driver's first
            needs: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
            if self._real:
                needs["num_gpus"] = gpus_of(job.config)
            ref = self._task.options(**needs).remote(self.settings, job)
        self._running[ref] = None
        future = chained(job, ref.future(), self._lost)
        future.add_done_callback(lambda f: self._finished(ref, f))
        return future

    def _finished(self, ref: Any, future: Future[TrialResult]) -> None:
        self._running.pop(ref, None)
        self._last_s = time.monotonic()
        if isinstance(future.exception(), WorkerLost):
            self.lost += 1
            return
        self._trials += 1
        facts = future.result().facts
        # GPU time: a tensor-parallel trial holds its GPUs together
        self._emulated_s += (float(facts.get("emulated_s") or 0.0)
                             * int(facts.get("emulated_gpus") or 1))
        self._overrun_s += float(facts.get("emulation_overrun_s") or 0.0)

    def pairs(self, configs: Sequence[ServingConfig], repeats: int, rate: float | None
              ) -> list[list[float]]:
        """The finalists' confirmation as one task: both configurations' repeats, interleaved,
        on one node (with the larger one's GPUs, real trials). A lost worker's task runs once
        more."""
        import ray

        needs: dict[str, Any] = {"num_cpus": 1}
        if self._real:
            needs["num_gpus"] = max(gpus_of(config_to_json(c)) for c in configs)
        jsons = [config_to_json(c) for c in configs]
        for attempt in range(2):
            ref = self._pairs.options(**needs).remote(self.settings, jsons, repeats, rate)
            try:
                return ray.get(ref)
            except self._lost as exc:
                if attempt:
                    raise WorkerLost(f"its worker was lost twice (last: {exc})") from None
        raise AssertionError("unreachable")

    def searched(self) -> None:
        """The search phase ended (every trial of it told): what followed (the reverted
        configurations' rounds, each waiting for the last) is the study's finish."""
        self._search = (self._last_s, self._emulated_s, self._trials)

    def summary(self) -> dict[str, Any] | None:
        """--emulate-gpus: the makespan on the emulated GPUs (scaled back to a real trial's
        seconds) beside the ideal, every trial's time divided among them: of the search (the
        budget's trials, asked ``--in-flight`` ahead), and of the whole study (its finish
        proposes trials in rounds, each after the last one's results). ``overrun_s``: the
        holds' time spent waiting for simulations past their end (this machine's CPUs did not
        keep pace with the emulated GPUs at this speedup: the makespan is that much too long)."""
        if not self.emulated or self._first_s is None:
            return None
        n = self.emulated

        def phase(end_s: float, seconds: float, trials: int) -> dict[str, Any]:
            makespan = (end_s - self._first_s) * self.speedup
            ideal = seconds / n
            return {"trials": trials, "gpu_seconds": round(seconds, 1),
                    "makespan_s": round(makespan, 1), "ideal_s": round(ideal, 1),
                    "efficiency": round(ideal / makespan, 4) if makespan > 0 else None}

        whole = phase(self._last_s, self._emulated_s, self._trials)
        search = phase(*self._search) if self._search is not None else whole
        return {"gpus": n, "speedup": self.speedup, **whole, "search": search,
                "overrun_s": round(self._overrun_s, 1)}

    def close(self) -> None:
        import ray

        for ref in list(self._running):  # a study that ends early leaves none running
            with contextlib.suppress(Exception):  # finished meanwhile, or its node is gone
                ray.cancel(ref, force=True)
        self._running.clear()
        if self._started:
            ray.shutdown()
