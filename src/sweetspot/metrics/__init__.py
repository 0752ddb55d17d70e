"""Turn what a run produced into numbers: ``vllm bench serve``'s result from per-request records
(``serve``) and the server's own counters from its Prometheus ``/metrics`` text (``prometheus``)."""

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
