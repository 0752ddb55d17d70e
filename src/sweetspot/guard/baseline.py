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

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweetspot._errors import SweetspotError

if TYPE_CHECKING:
    from sweetspot.tune.result import StudyResult, TrialResult

__all__ = ["DEFAULT_GOAL", "LATENCY_STATS", "Envelope", "envelope_from_result",
           "envelope_from_study", "load_baseline"]

# The latency statistics an envelope may hold a P99 for: bench's ``p99_<stat>_ms`` keys.
LATENCY_STATS = ("ttft", "tpot", "itl", "e2el")
# A study's pick when ``STUDY`` names no goal: the balanced one is what a deployment most often
# runs (throughput without giving up the latency SLOs); ``STUDY:baseline`` is the study's
# baseline trial (the configuration before the rollout).
DEFAULT_GOAL = "balanced"


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


def load_baseline(spec: str, storage: str | None = None) -> Envelope:
    """The envelope ``spec`` names: a ``bench --json`` result file, a report's ``trials.json``,
    or ``STUDY[:goal]`` in the study store (``storage``, default sweetspot's SQLite file).
    Anything unusable is a one-line ``SweetspotError``."""
    path = Path(spec)
    if path.suffix == ".json" or path.is_file():
        data = _read_json(path)
        if "trials" in data and "picks" in data:  # a report's trials.json
            from sweetspot.tune.result import StudyResult

            return envelope_from_study(StudyResult.from_dict(data), DEFAULT_GOAL, str(path))
        return envelope_from_result(data, str(path))
    name, _, goal = spec.partition(":")
    if not name:
        raise SweetspotError(f"baseline {spec!r}: expected STUDY[:goal] or a RESULT.json file")
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import study_data

    url = storage or default_storage_url()
    return envelope_from_study(study_data(StudyStore.load(url, name), url), goal or DEFAULT_GOAL,
                               f"study {name}")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SweetspotError(f"baseline {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SweetspotError(f"malformed baseline {path}: {first}") from None
    if not isinstance(data, dict):
        raise SweetspotError(f"malformed baseline {path}: expected a JSON object")
    return data


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SweetspotError(f"malformed baseline {where}: expected a number, got {value!r}")
    return float(value)


def _latencies(metrics: Mapping[str, Any], stat: str, where: str) -> dict[str, float]:
    out = {}
    for name in LATENCY_STATS:
        value = _number(metrics.get(f"{stat}_{name}_ms"), f"{where} ({stat}_{name}_ms)")
        if value is not None:
            out[name] = value
    return out


def _part(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` where it is a mapping, else an empty one (an absent part)."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def envelope_from_result(data: Mapping[str, Any], source: str) -> Envelope:
    """A ``bench --json`` result: its latencies at the rate it offered, its SLOs; no capacity
    (a run at one rate does not measure one)."""
    p99 = _latencies(data, "p99", source)
    if not p99:
        raise SweetspotError(f"malformed baseline {source}: no p99_*_ms latency: not a "
                             "`sweetspot bench --json` result")
    described, slos, server = (_part(data, k) for k in ("sweetspot", "slos", "server"))
    duration = _number(data.get("duration"), f"{source} (duration)")
    preemptions = _number(server.get("preemptions"), f"{source} (server.preemptions)")
    facts = _part(_part(data, "trial"), "startup")  # a launched server's start-up facts
    return Envelope(
        source=source, measured=True, model=described.get("model"),
        slos={k: float(v["limit_ms"]) for k, v in slos.items()
              if isinstance(v, Mapping) and isinstance(v.get("limit_ms"), int | float)},
        p99_ms=p99, median_ms=_latencies(data, "median", source),
        offered_rate=_number(described.get("rate"), f"{source} (sweetspot.rate)"),
        output_throughput=_number(data.get("output_throughput"), source),
        kv_cache_tokens=facts.get("kv_cache_tokens"),
        preemptions_per_s=None if preemptions is None or not duration
        else preemptions / duration,
        peak_kv_usage=_number(server.get("peak_kv_cache_usage"), source),
        workload=described.get("workload_spec"))


def envelope_from_study(study: StudyResult, goal: str, source: str) -> Envelope:
    """A study's pick for ``goal`` (or its baseline trial for ``baseline``)."""
    if goal == "baseline":
        number, command = study.baseline, None
    else:
        pick = next((p for p in study.picks if p.goal == goal), None)
        if pick is None:
            have = ", ".join(p.goal for p in study.picks) or "none"
            raise SweetspotError(f"{source} has no {goal!r} pick (its picks: {have}; "
                                 "or :baseline)")
        number, command = pick.trial, pick.command
    row = study.trial(number)
    if row is None or not row.ran:
        raise SweetspotError(f"{source}: the {goal} trial ({number}) has no measurements")
    traffic = row.runs[-1] if row.runs else {}
    return Envelope(
        source=f"{source}, {goal} (trial {number})", measured=study.backend != "sim",
        vllm_version=study.vllm_version, model=study.model, command=command,
        slos=dict(study.slos), p99_ms=_latencies(row.metrics, "p99", source),
        median_ms=_latencies(row.metrics, "median", source),
        offered_rate=row.offered_rate or study.offered_rate,
        capacity_rps=row.request_rate or None,
        output_throughput=_number(traffic.get("output_throughput"), source),
        kv_cache_tokens=row.kv_cache_tokens,
        max_num_seqs=row.config.get("max_num_seqs"),
        preemptions_per_s=_preemption_rate(row, traffic),
        peak_kv_usage=_number(row.facts.get("peak_kv_usage"), source),
        workload=study.settings.get("workload"))


def _preemption_rate(row: TrialResult, traffic: Mapping[str, Any]) -> float | None:
    """Per second of the traffic run where it was measured; 0 when the trial saw none."""
    server = traffic.get("server")
    if isinstance(server, Mapping) and server.get("preemptions") is not None \
            and traffic.get("duration"):
        return float(server["preemptions"]) / float(traffic["duration"])
    return 0.0 if row.facts.get("preemptions") == 0 else None
