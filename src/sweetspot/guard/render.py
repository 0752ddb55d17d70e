"""Windows and the watch's summary as JSON records and as text: plain data here, printing in
the CLI. Units in records follow bench's JSON: milliseconds for latencies, req/s, tok/s."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sweetspot.guard.checks import Alert
from sweetspot.guard.lengths import LengthFit
from sweetspot.guard.monitor import Summary, WindowReport

__all__ = ["COLUMNS", "alert_record", "summary_lines", "summary_record", "window_record",
           "window_row"]

COLUMNS = ("window", "time", "state", "req/s", "p99 TTFT", "p99 ITL", "p99 E2EL", "running",
           "waiting", "KV", "alerts")


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _lengths(fit: LengthFit | None) -> dict[str, Any] | None:
    if fit is None:
        return None
    return {"p50": round(fit.p50, 1), "p90": round(fit.p90, 1), "mean": round(fit.mean, 1),
            "count": fit.count}


def alert_record(alert: Alert) -> dict[str, Any]:
    return dataclasses.asdict(alert)


def window_record(report: WindowReport) -> dict[str, Any]:
    """One ``--jsonl`` line: the window's figures and its alerts."""
    w = report.window
    return {
        "type": "window", "window": w.number, "start": round(w.start_s, 3),
        "end": round(w.end_s, 3), "state": w.state, "detail": w.detail,
        "scrape_s": _round(w.scrape_s), "requests": w.requests,
        "request_rate": _round(w.request_rate), "arrival_rate": _round(w.arrival_rate),
        "prompt_tokens_per_s": _round(w.prompt_tokens_per_s, 1),
        "generation_tokens_per_s": _round(w.generation_tokens_per_s, 1),
        "preemptions": w.preemptions, "preemptions_per_s": _round(w.preemptions_per_s),
        "kv_usage": _round(w.kv_usage), "running": w.running, "waiting": w.waiting,
        "prefix_hit_rate": _round(w.prefix_hit_rate),
        "latencies_ms": {k: {"p50": round(q.p50_s * 1e3, 2), "p90": round(q.p90_s * 1e3, 2),
                             "p99": round(q.p99_s * 1e3, 2), "count": q.count}
                         for k, q in w.latencies.items()},
        "prompt_lengths": _lengths(w.prompt_lengths),
        "output_lengths": _lengths(w.output_lengths),
        "log_events": [dataclasses.asdict(e) for e in w.log_events],
        "alerts": [alert_record(a) for a in report.alerts],
    }


def summary_record(summary: Summary) -> dict[str, Any]:
    data = dataclasses.asdict(summary)
    data["worst_p99_ms"] = {k: round(v, 2) for k, v in summary.worst_p99_ms.items()}
    return {"type": "summary", **data}


def _ms(report: WindowReport, key: str) -> str:
    q = report.window.latencies.get(key)
    return "-" if q is None else f"{q.p99_s * 1e3:,.0f} ms"


def window_row(report: WindowReport) -> list[str]:
    """The window as a table row (``COLUMNS``)."""
    w = report.window
    rate = "-" if w.arrival_rate is None else f"{w.arrival_rate:.2f}"
    alerts = "; ".join(a.message for a in report.alerts) or "-"
    return [str(w.number), time.strftime("%H:%M:%S", time.localtime(w.end_s)), w.state, rate,
            _ms(report, "ttft"), _ms(report, "itl"), _ms(report, "e2el"),
            "-" if w.running is None else str(w.running),
            "-" if w.waiting is None else str(w.waiting),
            "-" if w.kv_usage is None else f"{w.kv_usage:.0%}", alerts]


def summary_lines(summary: Summary, live_workload: dict[str, Any] | None) -> list[str]:
    """What the watch saw, for people (Ctrl-C, the end of --windows)."""
    if not summary.windows:
        return ["watched no complete window"]
    span = (summary.end_s or 0) - (summary.start_s or 0)
    states = ", ".join(f"{n} {s}" for s, n in sorted(summary.states.items()))
    lines = [f"watched {summary.windows} windows over {span:.0f} s ({states}); "
             f"{summary.requests} requests finished"]
    if summary.worst_p99_ms:
        lines.append("worst window p99: " + ", ".join(
            f"{k.upper()} {v:,.0f} ms" for k, v in summary.worst_p99_ms.items()))
    if summary.peak_arrival_rate is not None:
        peak_kv = "-" if summary.peak_kv_usage is None else f"{summary.peak_kv_usage:.0%}"
        lines.append(f"peak arrivals {summary.peak_arrival_rate:.2f} req/s, peak KV usage "
                     f"{peak_kv}")
    alerts = ", ".join(f"{n} {k}" for k, n in sorted(summary.alerts.items()))
    lines.append(f"alerts: {alerts}" if alerts else "alerts: none")
    if live_workload is not None:
        prompt, output = live_workload["prompt"], live_workload["output"]
        lines.append(f"live traffic: prompts median {prompt['median']:,.0f} tokens (sigma "
                     f"{prompt['sigma']:.2f}), outputs median {output['median']:,.0f} "
                     f"(sigma {output['sigma']:.2f})")
    return lines
