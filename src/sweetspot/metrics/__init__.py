"""Turn what a run produced into numbers: ``vllm bench serve``'s result from per-request records
(``serve``) and the server's own counters from its Prometheus ``/metrics`` text (``prometheus``)."""

from typing import TYPE_CHECKING, Any

from sweetspot.metrics.serve import (
    LATENCY_NAMES,
    SLO_NAMES,
    BenchResult,
    LatencyStats,
    compute_result,
)

__all__ = [
    "LATENCY_NAMES",
    "SLO_NAMES",
    "BenchResult",
    "Histogram",
    "LatencyStats",
    "MetricNames",
    "MetricsSnapshot",
    "ServerFacts",
    "ServerQuantiles",
    "compute_result",
    "compute_server_facts",
    "histogram_quantile",
    "metric_names",
    "parse_metrics",
]

# The /metrics parser is for real servers only: loaded when one of its names is first asked for,
# so a simulation's process does not import it (3 ms of a 0.5 s run).
_PROMETHEUS = {"Histogram", "MetricNames", "MetricsSnapshot", "ServerFacts", "ServerQuantiles",
               "compute_server_facts", "histogram_quantile", "metric_names", "parse_metrics"}

if TYPE_CHECKING:
    from sweetspot.metrics.prometheus import (
        Histogram,
        MetricNames,
        MetricsSnapshot,
        ServerFacts,
        ServerQuantiles,
        compute_server_facts,
        histogram_quantile,
        metric_names,
        parse_metrics,
    )


def __getattr__(name: str) -> Any:
    if name in _PROMETHEUS:
        from sweetspot.metrics import prometheus

        return getattr(prometheus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
