"""The simulator behind the ``Backend`` seam: a trial predicted instead of measured.

Same inputs as the real backend (a ``ServingConfig``, requests, the load generator's settings)
and the same ``Trial`` out: per-request records in an ``EndpointRun`` (no ``/metrics`` texts; the
simulator's own counters go into ``facts``), the KV capacity as vLLM would log it, and the device
memory the memory model says the server would hold.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from sweetspot.backends.endpoint import EndpointRun
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.sim.cost import StepTimeModel
from sweetspot.backends.sim.simulator import SimSetup, simulate
from sweetspot.backends.trial import MoreRuns, Trial, TrialTimings, further_runs
from sweetspot.backends.vllm.logs import StartupFacts
from sweetspot.backends.vllm.memory import MemoryPeaks
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request

__all__ = ["SimBackend"]


class SimBackend:
    """Trials of one hardware + model + release, predicted by the simulator."""

    name = "sim"

    def __init__(self, setup: SimSetup, model: StepTimeModel | None = None, seed: int = 0):
        self.setup = setup  # its config is replaced per trial
        self.model = model  # a calibrated step-time model, or None for the roofline
        self.seed = seed

    @property
    def version(self):
        return self.setup.version

    def run(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig, *,
            more: MoreRuns = (), **_: Any) -> Trial:
        """One trial; each of ``more`` is simulated on a fresh server of the same config (the
        real backend reuses one server, so only its prefix cache can differ)."""
        started_s = time.monotonic()
        setup = dataclasses.replace(self.setup, config=config)
        run = simulate(setup, requests, max_concurrency=load.max_concurrency, model=self.model,
                       seed=self.seed)
        more_runs = []
        endpoint = _endpoint_run(run.records) if run.status == "ok" else None
        if endpoint is not None:
            for extra_requests, extra_load in further_runs(more, endpoint):
                extra = simulate(setup, extra_requests, max_concurrency=extra_load.max_concurrency,
                                 model=self.model, seed=self.seed)
                more_runs.append(_endpoint_run(extra.records))
        memory = run.memory
        startup = None
        peaks = None
        if memory is not None:
            startup = StartupFacts(
                kv_cache_tokens=memory.kv_cache_tokens if memory.ok else None,
                max_concurrency=memory.max_concurrency if memory.ok else None,
                max_model_len=memory.max_model_len, kv_cache_bytes=max(memory.kv_cache_bytes, 0),
                model_load_bytes=memory.weight_bytes, model_load_s=None,
                device="CPU" if setup.hardware.is_cpu else "GPU")
            peaks = MemoryPeaks(host_rss_bytes=None, device_bytes=memory.peak_device_bytes,
                                device_used_bytes=memory.peak_device_bytes,
                                device_baseline_bytes=0, samples=0)
        facts: dict[str, Any] = {}
        if run.status == "ok":
            f = run.facts
            facts = {"preemptions": f.preemptions, "peak_kv_usage": f.peak_kv_usage,
                     "mean_batch": f.mean_batch, "steps": f.steps,
                     "prefix_hit_rate": f.prefix_hit_rate,
                     "compute_bound_share": f.compute_bound_share,
                     "spec_acceptance_rate": f.spec_acceptance_rate}
        elapsed = time.monotonic() - started_s
        timings = TrialTimings(total_s=elapsed)  # simulated time is in the records
        return Trial(run.status, run.cause, endpoint, timings, startup=startup, memory=peaks,
                     vllm_version=str(setup.version), facts=facts, more_runs=tuple(more_runs))


def _endpoint_run(records) -> EndpointRun:
    ends = [r.end_s for r in records if r.end_s is not None]
    return EndpointRun(tuple(records), max(ends, default=0.0), 0, None, (), None)
