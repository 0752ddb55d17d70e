"""The live loop of ``sweetspot monitor``: scrape, measure the window, hold it against the
envelope and the tuned traffic, hand the report on; and what the whole watch saw.

Lifecycle: ``Monitor.open`` takes the first scrape — a server that does not answer it, or
answers without vLLM's metrics, is unusable input (``SweetspotError``): there is nothing to
watch yet. From then on nothing the server does raises: each later scrape closes a window whose
state says whether it was down, restarted or slow. ``watch`` paces the scrapes on a fixed grid
(a slow scrape delays no later one) and stops after ``windows`` windows or when interrupted;
the reports gathered so far stay on the monitor for the summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_url
from sweetspot.guard.baseline import Envelope
from sweetspot.guard.checks import Alert, check_window
from sweetspot.guard.drift import TunedTraffic, check_drift, live_workload
from sweetspot.guard.scrape import LogTail, Scrape, scrape
from sweetspot.guard.window import Window, add_histograms, measure_window
from sweetspot.metrics.prometheus import Histogram

__all__ = ["Monitor", "Summary", "WatchSettings", "WindowReport", "summarize", "watch"]

SLOW_SCRAPE_S = 2.0  # vLLM answers /metrics in milliseconds; seconds mean a choked API server


@dataclass(frozen=True, slots=True)
class WatchSettings:
    metrics_url: str  # the server's /metrics address
    interval_s: float = 15.0  # one window
    windows: int | None = None  # stop after this many (None: until interrupted)
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. Authorization
    log_file: Path | None = None  # the server's log, for OOMs and engine deaths
    slow_scrape_s: float = SLOW_SCRAPE_S

    @property
    def timeout_s(self) -> float:
        """A scrape gives up after this long: one window, within 3-10 s."""
        return max(3.0, min(10.0, self.interval_s))


@dataclass(frozen=True, slots=True)
class WindowReport:
    window: Window
    alerts: tuple[Alert, ...]  # most serious first


class Monitor:
    """What carries over between windows: the last scrape, the last one that answered, and
    the traffic seen so far (for the live workload)."""

    def __init__(self, settings: WatchSettings, envelope: Envelope | None,
                 tuned: TunedTraffic | None,
                 scrape_fn: Callable[[str, float, dict[str, str]], Scrape] = scrape) -> None:
        self.settings, self.envelope, self.tuned = settings, envelope, tuned
        self._scrape = scrape_fn
        self._log = LogTail(settings.log_file) if settings.log_file is not None else None
        self.reports: list[WindowReport] = []
        self._last: Scrape | None = None
        self._good: Scrape | None = None
        self.prompt_lengths: Histogram | None = None  # every window's deltas, added up
        self.output_lengths: Histogram | None = None
        self._arrivals, self._span_s = 0.0, 0.0

    @property
    def opened(self) -> bool:
        return self._good is not None

    def _get(self) -> Scrape:
        return self._scrape(self.settings.metrics_url, self.settings.timeout_s,
                            dict(self.settings.headers))

    def open(self) -> Scrape:
        """The first scrape; one that brings nothing to watch is a ``SweetspotError``."""
        first = self._get()
        if first.snapshot is None:
            hint = (" (monitor needs the server to answer its first scrape)" if not first.reached
                    else " (is it a vLLM server?)" if first.vllm else "")
            raise SweetspotError(f"{first.error}{hint}")
        if self._log is not None:
            self._log.events()  # the log's end: what it said before the watch is history
        self._last = self._good = first
        return first

    def step(self) -> WindowReport:
        """Scrape once more and report the window it closes."""
        if self._last is None or self._good is None:
            raise RuntimeError("Monitor.open() first")
        after = self._get()
        events = self._log.events() if self._log is not None else []
        window = measure_window(len(self.reports) + 1, self._last.taken_s, self._good, after,
                                slow_scrape_s=self.settings.slow_scrape_s, log_events=events)
        self._last = after
        if after.snapshot is not None:
            self._good = after
            self._count(window)
        alerts = check_window(window, self.envelope) + check_drift(window, self.tuned)
        report = WindowReport(window, tuple(sorted(alerts,
                                                   key=lambda a: a.severity != "critical")))
        self.reports.append(report)
        return report

    def _count(self, window: Window) -> None:
        self.prompt_lengths = add_histograms(self.prompt_lengths, window.prompt_histogram)
        self.output_lengths = add_histograms(self.output_lengths, window.output_histogram)
        if window.arrival_rate is not None:
            self._arrivals += window.arrival_rate * window.span_s
            self._span_s += window.span_s

    def live_workload(self) -> dict[str, Any] | None:
        """The traffic seen so far as a workload spec (None before any request finished)."""
        rate = self._arrivals / self._span_s if self._span_s > 0 else None
        return live_workload(self.prompt_lengths, self.output_lengths, rate,
                             redact_url(self.settings.metrics_url.removesuffix("/metrics")))


def watch(monitor: Monitor, on_window: Callable[[WindowReport], None], *,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> list[WindowReport]:
    """Open (unless opened), then one window every ``interval_s`` until ``windows`` (or an
    interrupt)."""
    if not monitor.opened:
        monitor.open()
    settings = monitor.settings
    start = clock()
    tick = done = 0
    while settings.windows is None or done < settings.windows:
        tick = max(tick + 1, int((clock() - start) // settings.interval_s) + 1)
        sleep(max(0.0, start + tick * settings.interval_s - clock()))  # an overrun skips ticks
        on_window(monitor.step())
        done += 1
    return monitor.reports


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything a watch saw, for the closing lines and ``--jsonl``'s last record."""

    windows: int
    start_s: float | None  # wall clock of the first window's start
    end_s: float | None
    states: Mapping[str, int]  # windows per state
    alerts: Mapping[str, int]  # alerts per kind
    requests: int  # finished requests counted
    worst_p99_ms: Mapping[str, float]  # the highest window P99 per latency
    peak_arrival_rate: float | None  # req/s
    peak_kv_usage: float | None  # 0-1
    drifted: bool


def summarize(reports: list[WindowReport]) -> Summary:
    windows = [r.window for r in reports]
    states: dict[str, int] = {}
    kinds: dict[str, int] = {}
    worst: dict[str, float] = {}
    for report in reports:
        states[report.window.state] = states.get(report.window.state, 0) + 1
        for alert in report.alerts:
            kinds[alert.kind] = kinds.get(alert.kind, 0) + 1
        for key, q in report.window.latencies.items():
            worst[key] = max(worst.get(key, 0.0), q.p99_s * 1e3)
    rates = [w.arrival_rate for w in windows if w.arrival_rate is not None]
    kv = [w.kv_usage for w in windows if w.kv_usage is not None]
    return Summary(
        windows=len(windows), start_s=windows[0].start_s if windows else None,
        end_s=windows[-1].end_s if windows else None, states=states, alerts=kinds,
        requests=sum(w.requests or 0 for w in windows), worst_p99_ms=worst,
        peak_arrival_rate=max(rates, default=None), peak_kv_usage=max(kv, default=None),
        drifted="drift" in kinds)
