"""One measured run, summarised: the client-side result and what the server counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.backends.endpoint import EndpointRun
from sweetspot.metrics.prometheus import ServerFacts, compute_server_facts, parse_metrics
from sweetspot.metrics.serve import BenchResult, compute_result

__all__ = ["Measurement", "bunched_streams", "measure"]


@dataclass(frozen=True, slots=True)
class Measurement:
    result: BenchResult
    server: ServerFacts | None  # None when the server exports no /metrics
    errors: tuple[tuple[str, int], ...]  # distinct failure causes with their counts

    def to_dict(self) -> dict[str, Any]:
        """vLLM's result keys at the top level (comparable with ``vllm bench serve``'s JSON),
        sweetspot's additions under "server" and "errors"."""
        return {**self.result.to_dict(),
                "server": asdict(self.server) if self.server else None,
                "errors": dict(self.errors)}


def measure(run: EndpointRun, *, percentiles: Sequence[float] = (50, 90, 95, 99),
            slos: Mapping[str, float] | None = None) -> Measurement:
    result = compute_result(run.records, duration_s=run.duration_s, percentiles=percentiles,
                            slos=slos)
    server = None
    if run.metrics_before is not None and run.metrics_after is not None:
        try:
            server = compute_server_facts(parse_metrics(run.metrics_before),
                                          parse_metrics(run.metrics_after),
                                          [parse_metrics(t) for t in run.metrics_samples])
        except SweetspotError:
            server = None  # a /metrics that is not Prometheus text: no server facts
    counts: dict[str, int] = {}
    for record in run.records:
        if record.error is not None:
            counts[record.error] = counts.get(record.error, 0) + 1
    return Measurement(result, server, tuple(sorted(counts.items(), key=lambda kv: -kv[1])))


def bunched_streams(data: Mapping[str, Any]) -> bool:
    """Whether a run's streams arrived in bursts rather than token by token: its median gap
    between chunks (ITL) under half its mean TPOT. A client or API server starved of CPU (seen
    on 2-core machines running the CPU build beside its client) receives a whole answer at
    once: TTFT then includes the decode and TPOT reads near 0, while the run's duration, and
    so its throughput, are still right -- except in a closed loop, whose next request waited
    for the late chunks. Such a run's latencies say nothing about step times."""
    try:
        itl, tpot = float(data["median_itl_ms"]), float(data["mean_tpot_ms"])
    except (KeyError, TypeError, ValueError):
        return False
    return tpot > 0 and itl < 0.5 * tpot
