"""What ``sweetspot compare`` compares: the metrics, which way is better, which are guarded, and
how much worse each may get before it counts as a regression (``--tolerance``).

A metric's values are per run of one side: throughputs from the capacity run's steady state,
latency statistics from the traffic run at the offered rate (as ``tune`` measures a trial:
``tune/evaluate.py``), failed requests from both, preemptions and peak memory from what the
server (or the simulator) counted. Positive quantities are compared as ratios (B / A - 1); counts
that may be 0 (failed requests, preemptions) as differences (B - A).

Guarded metrics are the ones ``--fail-on-regression`` gates on: output throughput and failed
requests always (a rollout must not serve less, nor fail more), plus the metrics that ``--slo``
and ``--tolerance`` name (goodput too where an SLO holds each request); with neither, the P99
TTFT and TPOT that ``tune`` judges by default. A generous tolerance (``throughput=100%``) takes
the edge off one that does not matter to you.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sweetspot._errors import SweetspotError
from sweetspot.metrics.slo import Slos

__all__ = ["DEFAULT_GUARDED", "METRICS", "Metric", "guarded_metrics", "metric_for",
           "parse_tolerances"]


@dataclass(frozen=True, slots=True)
class Metric:
    key: str  # the key of the value: bench's (p99_ttft_ms) or compare's own (peak_memory_bytes)
    label: str  # for people: "P99 TTFT"
    unit: str  # as reported: tok/s, req/s, ms, GiB, "" for counts
    higher_is_better: bool
    relative: bool  # compared as a ratio (True) or as a difference (counts that may be 0)
    scale: float = 1.0  # value -> reported unit (bytes -> GiB)


_LATENCY_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
_STAT_WORDS = {"median": "P50", "mean": "Mean"}


def _latency(key: str) -> Metric:
    stat, metric = key.removesuffix("_ms").split("_")
    word = _STAT_WORDS.get(stat, stat.upper())
    return Metric(key, f"{word} {_LATENCY_WORDS[metric]}", "ms", False, True)


METRICS: tuple[Metric, ...] = (
    Metric("output_throughput", "Output throughput", "tok/s", True, True),
    Metric("request_throughput", "Request throughput", "req/s", True, True),
    Metric("request_goodput", "Goodput", "req/s", True, True),
    *(_latency(f"{s}_{m}_ms") for m in _LATENCY_WORDS for s in ("median", "p99")),
    Metric("failed", "Failed requests", "", False, False),
    Metric("preemptions", "Preemptions", "", False, False),
    Metric("peak_memory_bytes", "Peak memory", "GiB", False, True, scale=1 / 2**30),
)
_BY_KEY = {m.key: m for m in METRICS}
DEFAULT_GUARDED = ("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "failed")
# What --tolerance accepts besides result keys and bare latencies (whose P99 they mean).
_ALIASES = {"throughput": "output_throughput", "goodput": "request_goodput",
            "errors": "failed", "memory": "peak_memory_bytes"}
_LATENCY_KEY = re.compile(r"(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms")


def metric_for(key: str) -> Metric:
    """The metric of a key: one of ``METRICS``, or any latency statistic bench reports."""
    if key in _BY_KEY:
        return _BY_KEY[key]
    if _LATENCY_KEY.fullmatch(key):
        return _latency(key)
    raise SweetspotError(f"unknown metric {key!r}")


def _key_of(name: str) -> str:
    """A --tolerance name as a key: ``tpot`` -> ``p99_tpot_ms``, ``p50_ttft`` -> its median."""
    name = name.strip().lower().removesuffix("_ms")
    name = _ALIASES.get(name, name)
    if name in _LATENCY_WORDS:
        return f"p99_{name}_ms"
    if name.startswith("p50_"):
        name = "median_" + name[4:]
    if _LATENCY_KEY.fullmatch(f"{name}_ms"):
        return f"{name}_ms"
    if name in _BY_KEY:
        return name
    raise SweetspotError(f"bad --tolerance {name!r}: a metric such as throughput, "
                         "request_throughput, goodput, ttft (its P99), p50_tpot, p99_e2el, "
                         "errors, preemptions or memory")


def parse_tolerances(text: str | None) -> dict[str, float]:
    """``--tolerance tpot=5%,errors=2``: how much worse B may be on a metric before it is a
    regression — a share for ratios (``5%``), a number for counts (failed requests,
    preemptions). Returns key -> tolerance (0.05, 2.0)."""
    tolerances: dict[str, float] = {}
    for part in filter(None, re.split(r"[,\s]+", text or "")):
        name, sep, value = part.partition("=")
        if not sep:
            raise SweetspotError(f"bad --tolerance {part!r}: expected metric=5% (or errors=2)")
        key = _key_of(name)
        metric = metric_for(key)
        text_value = value.strip()
        try:
            amount = (float(text_value.removesuffix("%")) / 100 if text_value.endswith("%")
                      else float(text_value))
        except ValueError:
            raise SweetspotError(f"bad --tolerance {part!r}: expected a share like 5% or "
                                 "a count") from None
        if metric.relative and not text_value.endswith("%"):
            raise SweetspotError(f"bad --tolerance {part!r}: {metric.label} is compared as a "
                                 "ratio; give a share such as 5%")
        if not metric.relative and text_value.endswith("%"):
            raise SweetspotError(f"bad --tolerance {part!r}: {metric.label} is a count; give "
                                 "how many more B may have, e.g. errors=2")
        if not 0 <= amount < float("inf"):
            raise SweetspotError(f"bad --tolerance {part!r}: must be 0 or more")
        if key in tolerances:
            raise SweetspotError(f"bad --tolerance {part!r}: {metric.label} is given twice")
        tolerances[key] = amount
    return tolerances


def guarded_metrics(slos: Slos, tolerances: Mapping[str, float]) -> tuple[str, ...]:
    """The keys ``--fail-on-regression`` gates on (see the module docstring), in table order."""
    named = [s.key for s in slos.items] + list(tolerances)
    if slos.goodput_ms:
        named.append("request_goodput")
    wanted = set(named or DEFAULT_GUARDED) | {"output_throughput", "failed"}
    ordered = [m.key for m in METRICS if m.key in wanted]
    return tuple(ordered + sorted(wanted - set(ordered)))
