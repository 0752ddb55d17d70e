"""Four picks from one study's rows, plus the Pareto front, each with why it wins.

Candidates are the rows that ran (status ok), served every request and met every SLO
(``slo_ok``), and — when the workload has a rate — whose capacity keeps up with it (capacity
requests/s at least the offered rate: below it the queue grows for as long as the traffic lasts,
and a P99 measured over a short run flatters it); if none keeps up, all candidates are used and
the reasons say so. Throughput is the capacity run's output tokens/s; latency is P99
end-to-end latency of the traffic run (the workload at its own rate).

- max-throughput: the highest throughput;
- low-latency: the lowest P99 latency;
- memory-limited: the smallest device-memory footprint (within ``memory_limit_bytes`` when
  given), then the highest throughput;
- balanced: the best product of throughput and inverse latency, each relative to the best seen
  (the knee of the front: neither goal gives up much).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GOALS", "Pick", "choose_picks", "pareto_front", "reasons_for"]

GOALS = ("max-throughput", "low-latency", "memory-limited", "balanced")
THROUGHPUT = "output_throughput"
LATENCY = "p99_e2el_ms"


@dataclass(frozen=True, slots=True)
class Pick:
    goal: str
    row: dict
    gain: dict[str, float]  # relative change vs the baseline: +0.35 = 35 % more
    reasons: tuple[str, ...]


def _tp(row: dict) -> float:
    return row["metrics"].get(THROUGHPUT, 0.0)


def _lat(row: dict) -> float:
    return row["metrics"].get(LATENCY, float("inf"))


def candidates(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and r["slo_ok"] and r["metrics"]]


def pareto_front(rows: Sequence[dict]) -> list[dict]:
    """Rows no other row beats on both throughput (higher) and P99 latency (lower), by
    ascending throughput."""
    ok = sorted((r for r in rows if r["status"] == "ok" and r["metrics"]),
                key=lambda r: (-_tp(r), _lat(r)))
    front, best_lat = [], float("inf")
    for row in ok:
        if _lat(row) < best_lat:
            front.append(row)
            best_lat = _lat(row)
    return front[::-1]


def choose_picks(rows: Sequence[dict], baseline: dict | None, offered_rate: float | None,
                 memory_limit_bytes: int | None = None) -> list[Pick]:
    pool = candidates(rows)
    if not pool:
        return []
    keeping = [r for r in pool if keeps_up(r, offered_rate)]
    overloaded = not keeping
    pool = keeping or pool
    picks: dict[str, dict] = {}
    picks["max-throughput"] = max(pool, key=lambda r: (_tp(r), -_lat(r)))
    picks["low-latency"] = min(pool, key=lambda r: (_lat(r), -_tp(r)))
    sized = [r for r in pool if r.get("memory_bytes") is not None
             and (memory_limit_bytes is None or r["memory_bytes"] <= memory_limit_bytes)]
    if sized:
        picks["memory-limited"] = min(sized, key=lambda r: (r["memory_bytes"], -_tp(r)))
    best_tp = max(_tp(r) for r in pool) or 1.0
    best_lat = min(_lat(r) for r in pool) or 1.0
    picks["balanced"] = max(pool, key=lambda r: (_tp(r) / best_tp) * (best_lat / _lat(r)))
    note = (_overload_note(pool, offered_rate),) if overloaded else ()
    return [Pick(goal, picks[goal], _gain(picks[goal], baseline),
                 reasons_for(goal, picks[goal], baseline, rows) + note)
            for goal in GOALS if goal in picks]


def _overload_note(pool: Sequence[dict], offered_rate: float | None) -> str:
    """What an operator does next when nothing keeps up: the most any trial served, and where
    the missing capacity comes from."""
    best = max(pool, key=lambda r: r["metrics"].get("request_throughput", 0))
    capacity = best["metrics"].get("request_throughput", 0)
    return (f"no configuration's capacity reaches the offered {offered_rate:g} req/s (the "
            f"most: {capacity:.2f} req/s, trial {best.get('number')}): latencies grow with "
            "the run's length; offer less traffic per replica, or more GPUs (replicas, tensor "
            "parallelism)")


def keeps_up(row: dict, offered_rate: float | None) -> bool:
    """Its capacity (requests/s at saturation) reaches the traffic's rate."""
    return offered_rate is None or row["metrics"].get("request_throughput", 0) >= offered_rate


def _gain(row: dict, baseline: dict | None) -> dict[str, float]:
    if baseline is None or baseline["status"] != "ok" or not baseline["metrics"]:
        return {}
    out = {}
    for key in (THROUGHPUT, LATENCY, "p99_ttft_ms", "p99_tpot_ms"):
        base, new = baseline["metrics"].get(key), row["metrics"].get(key)
        if base and new is not None:
            out[key] = new / base - 1
    if baseline.get("memory_bytes") and row.get("memory_bytes"):
        out["memory_bytes"] = row["memory_bytes"] / baseline["memory_bytes"] - 1
    return out


def reasons_for(goal: str, row: dict, baseline: dict | None, rows: Sequence[dict]
                ) -> tuple[str, ...]:
    """Why this row wins its goal, from the simulator's or server's counters and the sweeps."""
    out: list[str] = []
    m, facts, config = row["metrics"], row.get("facts", {}), row["config"]
    if goal == "max-throughput":
        out.append(f"highest throughput of the study: {_tp(row):,.0f} output tok/s")
    elif goal == "low-latency":
        out.append(f"lowest P99 end-to-end latency at the workload's rate: "
                   f"{_lat(row):,.0f} ms")
    elif goal == "memory-limited" and row.get("memory_bytes"):
        out.append(f"smallest footprint that meets the SLOs: "
                   f"{row['memory_bytes'] / 2**30:.1f} GiB of device memory")
    elif goal == "balanced":
        out.append(f"best throughput x latency trade: {_tp(row):,.0f} tok/s at P99 "
                   f"{_lat(row):,.0f} ms")
    seqs = config.get("max_num_seqs")
    batch = facts.get("mean_batch")
    peak_kv = facts.get("peak_kv_usage")
    if peak_kv is not None and peak_kv >= 0.9:
        out.append(f"KV-bound: the cache was {peak_kv:.0%} full at peak"
                   + (f" with {batch:.0f} requests running on average" if batch else ""))
    elif seqs and batch and batch >= 0.85 * seqs:
        out.append(f"batch-bound: {batch:.0f} requests running on average against "
                   f"max-num-seqs {seqs}")
    if facts.get("preemptions"):
        out.append(f"{facts['preemptions']} preemptions (KV cache ran out)")
    share = facts.get("compute_bound_share")
    if share is not None and m:
        out.append(f"{share:.0%} of steps compute-bound, {1 - share:.0%} memory-bound")
    if baseline is not None:
        for knob, value in config.items():
            before = baseline["config"].get(knob)
            if value != before:
                out.append(f"{knob}: {_text(before)} -> {_text(value)}"
                           + _sweep_note(knob, value, baseline, rows))
    return tuple(out)


def _sweep_note(knob: str, value, baseline: dict, rows: Sequence[dict]) -> str:
    """How the knob alone did in its one-knob sweep, when the study has one."""
    for r in rows:
        if r.get("phase") == "ofat" and r.get("knob") == knob and r["config"].get(knob) == value:
            if r["status"] != "ok" or baseline["status"] != "ok" or not baseline["metrics"]:
                return f" (alone: {r['status']})"
            change = _tp(r) / (_tp(baseline) or 1.0) - 1
            return f" (alone: {change:+.0%} throughput)"
    return ""


def _text(value) -> str:
    if isinstance(value, dict):
        return f"{value.get('method')} k={value.get('num_speculative_tokens')}"
    return "default" if value is None else str(value)
