"""The simulator behind the ``Backend`` seam: a trial predicted instead of measured.

Same inputs as the real backend (a ``ServingConfig``, requests, the load generator's settings)
and the same ``Trial`` out: per-request records in a ``Run`` (no ``/metrics`` texts; the
simulator's own counters go into ``counters``), the KV capacity as vLLM would log it, and the
device memory the memory model says the server would hold. Serving a configuration is its
simulated start-up (vLLM's checks, the memory model); each run is simulated on a fresh server
of it (a real server is reused, so only its prefix cache can differ).

The simulator is deterministic: one configuration and one seed give the same numbers every time,
where fresh real servers of one configuration differ (on the H100 two read 4,540 and 4,970 tok/s
in their engine logs, 9 %; the CPU build drifts ±4 % run to run: benchmarks/RESULTS.md). With
``speed_spread`` > 0 each served configuration draws its own speed — every step of that server
takes exp(N(0, speed_spread)) times the model's time, a draw from the backend's seed and how
many servers it has served — so repeats of a configuration vary as fresh servers do.
``sweetspot compare`` turns it on (its statistics would be degenerate without it); ``tune``
never does, so its trials and picks stay exact.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from sweetspot.backends.base import (
    MemoryPeaks,
    Run,
    Server,
    ServerFacts,
    Target,
    Trial,
    TrialTimings,
)
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim.cost import StepTimeModel
from sweetspot.backends.sim.simulator import SimSetup, SimStart, simulate, start
from sweetspot.backends.sim.uncertainty import StepUncertainty, step_uncertainty
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request

__all__ = ["SPEED_STREAM", "SimBackend"]

SPEED_STREAM = 0x5EED  # keeps the speed draws apart from the seed's other streams


class SimBackend:
    """Trials of one hardware + model + release, predicted by the simulator."""

    name = "sim"
    measured = False

    def __init__(self, setup: SimSetup, model: StepTimeModel | None = None, seed: int = 0,
                 speed_spread: float = 0.0, fitted_on: tuple[dict, ...] | None = None):
        self.setup = setup  # its config is replaced per trial
        self.model = model  # a calibrated step-time model, or None for the roofline
        self.fitted_on = fitted_on  # the calibration's fit rows (its residuals)
        self.seed = seed
        self.speed_spread = speed_spread  # log-sd of a served configuration's step times
        self._served = 0  # servers served so far: each draws its own speed

    @classmethod
    def for_target(cls, target: Target) -> SimBackend:
        step_model = fitted_on = None
        if target.calibration:
            from sweetspot.backends.sim.calibration import load_calibration

            cal = load_calibration(Path(target.calibration), target.setup.hardware,
                                   target.setup.arch)
            step_model, fitted_on = cal.step_model, cal.fitted_on
        return cls(target.setup, step_model, seed=target.seed,
                   speed_spread=float(target.options.get("speed_spread", 0.0)),
                   fitted_on=fitted_on)

    def uncertainty(self) -> StepUncertainty:
        """How far this backend's step times may be off (``uncertainty.step_uncertainty``)."""
        return step_uncertainty(self.setup, self.fitted_on if self.model is not None else None)

    def _step_factor(self) -> float:
        """The next served configuration's step-time factor (1 without a spread)."""
        self._served += 1
        if self.speed_spread <= 0:
            return 1.0
        rng = np.random.default_rng((self.seed, SPEED_STREAM, self._served))
        return float(np.exp(rng.normal(0.0, self.speed_spread)))

    @property
    def version(self):
        return self.setup.version

    @contextmanager
    def serve(self, config: ServingConfig) -> Iterator[Server]:
        started_s = time.monotonic()
        server = _SimServer(self, dataclasses.replace(self.setup, config=config),
                            self._step_factor())
        try:
            yield server
        finally:
            server.close(Trial(
                server.status, server.cause, tuple(server.runs),
                TrialTimings(total_s=time.monotonic() - started_s),  # simulated time: records
                server=server.facts, counters=server.counters,
                vllm_version=str(self.setup.version)))


class _SimServer(Server):
    def __init__(self, backend: SimBackend, setup: SimSetup, step_factor: float = 1.0) -> None:
        super().__init__()
        self.backend, self.setup, self.step_factor = backend, setup, step_factor
        started = start(setup)
        self.facts = _facts(started, setup)
        self.counters: dict[str, Any] = {}
        if started.status != "ok":
            self.fail(started.status, started.cause or started.status)

    def _run(self, requests: Sequence[Request], load: LoadConfig,
             on_done: Callable[[], None] | None) -> Run | None:
        run = simulate(self.setup, requests, max_concurrency=load.max_concurrency,
                       model=self.backend.model, seed=self.backend.seed,
                       step_factor=self.step_factor)
        if run.status != "ok":  # the start-up said so already; a changed setup would
            self.fail(run.status, run.cause or run.status)
            return None
        if not self.counters:  # the first run's, as a real server's log would say
            f = run.facts
            self.counters = {"preemptions": f.preemptions, "peak_kv_usage": f.peak_kv_usage,
                             "mean_batch": f.mean_batch, "steps": f.steps,
                             "prefix_hit_rate": f.prefix_hit_rate,
                             "compute_bound_share": f.compute_bound_share,
                             "spec_acceptance_rate": f.spec_acceptance_rate}
            if self.step_factor != 1.0:  # this server's drawn speed (speed_spread)
                self.counters["step_factor"] = self.step_factor
        return _as_run(run.records)


def _facts(started: SimStart, setup: SimSetup) -> ServerFacts:
    """What vLLM would log starting this configuration, and the memory it would hold."""
    memory = started.memory
    if memory is None:
        return ServerFacts()
    peaks = MemoryPeaks(host_rss_bytes=None, device_bytes=memory.peak_device_bytes,
                        device_used_bytes=memory.peak_device_bytes, device_baseline_bytes=0,
                        samples=0)
    return ServerFacts(
        kv_cache_tokens=memory.kv_cache_tokens if memory.ok else None,
        max_concurrency=memory.max_concurrency if memory.ok else None,
        max_model_len=memory.max_model_len, kv_cache_bytes=max(memory.kv_cache_bytes, 0),
        model_load_bytes=memory.weight_bytes, model_load_s=None,
        device="CPU" if setup.hardware.is_cpu else "GPU", memory=peaks)


def _as_run(records: tuple[RequestRecord, ...]) -> Run:
    ends = [r.end_s for r in records if r.end_s is not None]
    return Run(records, max(ends, default=0.0))
