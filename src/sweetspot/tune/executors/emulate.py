"""``--executor ray --emulate-gpus N``: a study planned on N GPUs without them.

Each simulated trial becomes two Ray tasks: the simulation (one CPU, any worker), then a *hold*
that asks for the configuration's GPUs of a custom resource, ``emulated_gpu`` (N of them on the
Ray that the study starts here; a cluster declares them with ``ray start --resources``), and
keeps them for the wall time a real trial of that configuration would take, divided by
``speedup``. Ray packs the holds onto the emulated GPUs as it would pack real trials, so the
study's makespan is measured, and set beside the ideal (every trial's GPU time ÷ N). A hold
starts before its simulation ends (it waits for it inside): the simulations run on this
machine's CPUs, which a real study does not need, so they must not decide when a GPU is taken.

A real trial's wall time (``trial_seconds``): the server's start-up, its runs, its stop.
- Start-up: 50 s for a single-GPU server, measured on an H100 (2026-12-06, vLLM 0.24, Qwen2.5-7B
  with dummy weights and a warm compile cache: 49-66 s from spawn to stopped besides the runs,
  benchmarks/gpu/results-2026-12-06-issue17-h100), plus its weights at 2 GB/s (safetensors
  from local disk: dummy weights load in 0.3 s, which the 50 s does not count), plus 10 s for a
  tensor- or pipeline-parallel group (its workers and NCCL start).
- Runs: the simulated capacity run lengthened to a real trial's turnovers
  (``MEASURED_TURNOVERS`` against the simulator's ``CAPACITY_TURNOVERS``), and the traffic run.
"""

from __future__ import annotations

import time
from typing import Any

from sweetspot.tune.executors.base import Job, evaluate_job
from sweetspot.tune.settings import StudySettings

__all__ = ["EMULATED_GPU", "trial_seconds"]

EMULATED_GPU = "emulated_gpu"  # the custom Ray resource a hold asks for
STARTUP_S = 50.0
LOAD_BYTES_PER_S = 2e9
PARALLEL_GROUP_S = 10.0


def trial_seconds(row: dict[str, Any], weight_bytes: int, gpus: int) -> float:
    """A real trial of ``row``'s configuration: its wall time (see the module docstring)."""
    from sweetspot.tune.evaluate import CAPACITY_TURNOVERS, MEASURED_TURNOVERS

    # each GPU of a parallel group loads its own shard at once
    seconds = (STARTUP_S + weight_bytes / gpus / LOAD_BYTES_PER_S
               + (PARALLEL_GROUP_S if gpus > 1 else 0.0))
    facts, metrics = row.get("facts") or {}, row.get("metrics") or {}
    capacity_s = float(facts.get("capacity_duration_s") or metrics.get("duration") or 0.0)
    traffic_s = float(facts.get("traffic_duration_s") or 0.0)
    return seconds + capacity_s * MEASURED_TURNOVERS / CAPACITY_TURNOVERS + traffic_s


_WEIGHTS: dict[str, int] = {}  # a worker process's model weights, by model and quantisation


def simulate(settings: StudySettings, job: Job, gpus: int) -> tuple[dict[str, Any], float]:
    """The simulation task: the trial's row and a real trial's wall time (a server that
    fails to start fails within its start-up)."""
    from sweetspot.tune.resolve import resolve_study

    row = evaluate_job(settings, job)
    if row.get("status") != "ok":
        return row, STARTUP_S
    key = f"{settings.model}|{settings.quant}"
    if key not in _WEIGHTS:
        study = resolve_study(settings)
        _WEIGHTS[key] = study.model.arch.weight_bytes(study.quant)
    return row, trial_seconds(row, _WEIGHTS[key], gpus)


def hold(simulation: list[Any], gpus: int, speedup: float) -> dict[str, Any]:
    """The hold task: takes its emulated GPUs when Ray gives them, as a real trial would take
    real ones, and keeps them for the trial's wall time (scaled). ``simulation``: the
    simulation task's ref, in a list so that Ray does not wait for it before the hold starts:
    the simulation runs on this machine's CPUs, which are no part of the plan, so it is waited
    for inside the hold. Where it comes later than the hold's end would be, the hold is that
    much longer: ``emulation_overrun_s`` (a real trial's seconds) says the CPUs did not keep
    pace with the emulated GPUs at this ``--emulate-speedup``."""
    import ray

    started = time.monotonic()
    row, seconds = ray.get(simulation[0])
    waited = time.monotonic() - started
    time.sleep(max(0.0, seconds / speedup - waited))
    overrun = max(0.0, waited - seconds / speedup) * speedup
    return {**row, "facts": {**(row.get("facts") or {}), "emulated_s": round(seconds, 3),
                             "emulated_gpus": gpus, "emulation_overrun_s": round(overrun, 3)}}
