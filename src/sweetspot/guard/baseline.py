"""What a deployment was tuned to do: the envelope a live server is held against.

``monitor`` holds each window of a live server against it, and ``monitor --emit-rules`` /
``--emit-dashboard`` turn it into Prometheus rules and a Grafana dashboard. It comes from a
study's pick (``STUDY[:goal]``) or from a saved ``bench --json`` result; ``load_baseline`` reads
either. Every field a source does not know is None (or empty), and whoever reads it says so
rather than inventing a limit.

Units: milliseconds for latencies (as SLOs and bench results give them), requests per second,
tokens per second, tokens, and a 0-1 fraction for KV-cache usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LATENCY_STATS", "Envelope"]

# The latency statistics an envelope may hold a P99 for: bench's ``p99_<stat>_ms`` keys.
LATENCY_STATS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True, slots=True)
class Envelope:
    """The pick's limits and what it measured (or the simulator predicted) at its tuned load."""

    source: str  # one line for people: "study demo, pick max-throughput (trial 7)" or a path
    measured: bool  # True: measured on a real server; False: predicted by the simulator
    vllm_version: str | None = None  # the target release (its /metrics names differ by release)
    model: str | None = None
    command: str | None = None  # the pick's `vllm serve ...`
    slos: Mapping[str, float] = field(default_factory=dict)  # SLO key (p99_ttft...) -> ms
    p99_ms: Mapping[str, float] = field(default_factory=dict)  # LATENCY_STATS -> P99 at the rate
    median_ms: Mapping[str, float] = field(default_factory=dict)  # LATENCY_STATS -> median
    offered_rate: float | None = None  # req/s it was tuned at (None: the workload's own)
    capacity_rps: float | None = None  # req/s it sustains at steady state
    output_throughput: float | None = None  # tok/s at the tuned rate
    kv_cache_tokens: int | None = None  # what its KV cache holds
    max_num_seqs: int | None = None  # its batch limit: the waiting queue is measured against it
    preemptions_per_s: float | None = None  # at the tuned rate (0 when none were seen)
    # The fullest its KV cache got at the tuned rate, 0-1 (the server's /metrics peak, the
    # simulator's peak_kv_usage): the rules export's KV-headroom alert holds the live gauge to it.
    peak_kv_usage: float | None = None
    workload: Mapping[str, Any] | None = None  # the tuned workload (workload_to_dict form)
