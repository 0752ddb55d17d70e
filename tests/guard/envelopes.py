"""Envelopes the guard tests build rules and dashboards from."""

from __future__ import annotations

from sweetspot.guard.baseline import Envelope
from sweetspot.guard.rules import RuleOptions

# The real-Prometheus test's patience: windows of seconds (it scrapes and evaluates every 1 s).
QUICK = RuleOptions(rate_window="10s", for_="2s", down_for="2s", restart_window="20s")

FULL = Envelope(
    source="study demo, pick max-throughput (trial 7)", measured=True, vllm_version="0.32.0",
    model="Qwen/Qwen2.5-14B-Instruct-AWQ", command="vllm serve ... --max-num-seqs 128",
    slos={"p99_ttft": 300.0, "p99_tpot": 50.0},
    p99_ms={"ttft": 212.0, "tpot": 31.5, "itl": 40.0, "e2el": 4100.0},
    median_ms={"ttft": 80.0, "tpot": 22.0},
    offered_rate=6.5, capacity_rps=10.0, output_throughput=1650.0, kv_cache_tokens=180_000,
    max_num_seqs=128, preemptions_per_s=0.25, peak_kv_usage=0.72,
)
# Only what a saved bench result of a server sweetspot did not configure knows.
SPARSE = Envelope(source="bench.json", measured=True, vllm_version="0.32.0")
# A release before the ITL and per-request TPOT histograms (and no preemption seen).
OLD = Envelope(
    source="study old, pick balanced", measured=False, vllm_version="0.10.1",
    slos={"p99_itl": 60.0, "p99_tpot": 45.0, "mean_ttft": 150.0}, p99_ms={"itl": 41.0},
    capacity_rps=3.2, max_num_seqs=64, preemptions_per_s=0.0, peak_kv_usage=1.0,
)
# Every statistic an SLO may name.
STATS = Envelope(
    source="study stats", measured=True, vllm_version="0.33.0",
    slos={"p99.9_ttft": 900.0, "median_e2el": 2500.0, "mean_itl": 35.0, "p90_tpot": 40.0},
    median_ms={"e2el": 1800.0},
)
