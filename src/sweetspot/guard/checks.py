"""A window held against the envelope: which limits it broke, as ``Alert`` values.

Critical: the server is down, restarted, ran out of memory or lost its engine (its log), an SLO
was missed, or more traffic arrived than the pick's capacity. Warning: a P99 whose whole
bucket lies beyond twice what the pick measured at its tuned rate, preemptions beyond twice the
tuned rate, a KV cache nearly full, a whole batch waiting, a slow scrape, traffic unlike the
tuned workload (``drift``).

Latencies are judged only on windows with at least ``MIN_REQUESTS`` observations: a P99 of
three requests is one request. For SLOs, histogram quantiles are read as Prometheus'
``histogram_quantile`` reads them (linear within a bucket), so a limit inside a bucket is met or
missed as a Prometheus alert on the same series would be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sweetspot.guard.baseline import Envelope
from sweetspot.guard.window import Window

__all__ = ["Alert", "check_window", "readable_slos"]

MIN_REQUESTS = 5  # observations a window needs before its latencies are judged
TUNED_FACTOR = 2.0  # a P99 this many times the tuned one is a warning
CAPACITY_MARGIN = 1.05  # arrivals beyond capacity by more than a rate estimate's noise
KV_FULL = 0.95  # KV-cache usage from which the next burst preempts
_SLO_KEY = re.compile(r"^(median|p50|p90|p99)_(ttft|tpot|itl|e2el)_ms$")


@dataclass(frozen=True, slots=True)
class Alert:
    kind: str  # slo, capacity, server down, restarted, oom, engine dead, tuned p99,
    #            preemptions, kv cache, queue, slow scrape, drift
    severity: str  # "critical" or "warning"
    message: str  # one line for people
    value: float | None = None  # what the window showed (ms, req/s, fraction ...)
    limit: float | None = None  # what it was held against


def readable_slos(envelope: Envelope | None) -> tuple[dict[str, float], list[str]]:
    """The SLOs a window can be checked on (its quantiles are P50, P90 and P99),
    and those it cannot (``p95_ttft_ms``, ``mean_tpot_ms`` ...)."""
    slos = dict(envelope.slos) if envelope is not None else {}
    readable = {k: v for k, v in slos.items() if _SLO_KEY.match(k)}
    return readable, sorted(set(slos) - set(readable))


def _window_ms(window: Window, stat: str, latency: str) -> float | None:
    q = window.latencies.get(latency)
    if q is None or q.count < MIN_REQUESTS:
        return None
    seconds = {"median": q.p50_s, "p50": q.p50_s, "p90": q.p90_s, "p99": q.p99_s}.get(stat)
    return None if seconds is None else seconds * 1e3


def _state_alerts(window: Window) -> list[Alert]:
    alerts = []
    if window.state in ("server down", "restarted"):
        alerts.append(Alert(window.state, "critical", f"{window.state}: {window.detail}"))
    elif window.state == "slow scrape":
        alerts.append(Alert("slow scrape", "warning", f"slow scrape: {window.detail}",
                            window.scrape_s))
    for event in window.log_events:
        alerts.append(Alert(event.kind, "critical", f"{event.kind} in the server log: "
                                                    f"{event.line}"))
    return alerts


def _latency_alerts(window: Window, envelope: Envelope | None) -> list[Alert]:
    alerts, missed = [], set()
    for key, limit in readable_slos(envelope)[0].items():
        match = _SLO_KEY.match(key)
        assert match is not None
        stat, latency = match.groups()
        value = _window_ms(window, stat, latency)
        if value is not None and value > limit:
            missed.add(latency)
            alerts.append(Alert("slo", "critical", f"{stat} {latency.upper()} {value:.0f} ms "
                                                   f"> SLO {limit:g} ms", value, limit))
    tuned = envelope.p99_ms if envelope is not None else {}
    for latency, tuned_ms in tuned.items():
        value = _window_ms(window, "p99", latency)
        floor_ms = window.p99_floor_s.get(latency, 0.0) * 1e3
        # beyond the histogram's resolution: the P99's whole bucket lies above the limit (an
        # ITL tuned at 2 ms reads "up to 10 ms" in vLLM's first bucket, which is no news)
        if latency not in missed and value is not None and tuned_ms > 0 \
                and floor_ms > TUNED_FACTOR * tuned_ms:
            alerts.append(Alert("tuned p99", "warning",
                                f"p99 {latency.upper()} {value:.0f} ms, {value / tuned_ms:.1f}x "
                                f"the {tuned_ms:.0f} ms it was tuned to", value, tuned_ms))
    return alerts


def _load_alerts(window: Window, envelope: Envelope | None) -> list[Alert]:
    alerts = []
    capacity = envelope.capacity_rps if envelope is not None else None
    rate = window.arrival_rate
    if capacity and rate is not None and rate > CAPACITY_MARGIN * capacity:
        alerts.append(Alert("capacity", "critical", f"{rate:.2f} req/s arriving, beyond the "
                                                    f"tuned capacity {capacity:.2f} req/s",
                            rate, capacity))
    tuned_preempt = envelope.preemptions_per_s if envelope is not None else None
    live = window.preemptions_per_s
    if window.preemptions and live is not None and live > 2 * (tuned_preempt or 0.0):
        was = "none" if not tuned_preempt else f"{tuned_preempt:.2f}/s"
        alerts.append(Alert("preemptions", "warning", f"{window.preemptions} preemptions "
                                                      f"({live:.2f}/s; tuned: {was})",
                            live, tuned_preempt))
    if window.kv_usage is not None and window.kv_usage >= KV_FULL:
        alerts.append(Alert("kv cache", "warning", f"KV cache {window.kv_usage:.0%} full",
                            window.kv_usage, KV_FULL))
    batch = envelope.max_num_seqs if envelope is not None else None
    waiting, running = window.waiting, window.running
    if waiting and (waiting >= batch if batch else running and waiting > running):
        limit = batch or running
        alerts.append(Alert("queue", "warning", f"{waiting} requests waiting (a batch holds "
                                                f"{limit})", waiting, limit))
    return alerts


def check_window(window: Window, envelope: Envelope | None) -> list[Alert]:
    """Every limit ``window`` broke, most serious first (drift is checked apart)."""
    alerts = _state_alerts(window)
    if window.state != "server down":
        alerts += _latency_alerts(window, envelope) + _load_alerts(window, envelope)
    return sorted(alerts, key=lambda a: a.severity != "critical")
