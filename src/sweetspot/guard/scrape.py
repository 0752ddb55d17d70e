"""Reading a live server: one ``/metrics`` scrape at a time, and the new lines of its log.

A scrape never raises for the server's sake: refused, timed out, an HTTP error or a body that
is not Prometheus text all come back as a ``Scrape`` without a snapshot and with one line
saying why, so that the loop can call it "server down" and go on. Only the caller decides
whether that is bad input (the very first scrape) or a state of the watched server.
"""

from __future__ import annotations

import http.client
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.metrics.prometheus import MetricsSnapshot, parse_metrics

__all__ = ["LogEvent", "LogTail", "Scrape", "metrics_url", "scrape"]

# vLLM's own counters: a /metrics without any of them is another program's.
VLLM_PREFIX = "vllm:"


@dataclass(frozen=True, slots=True)
class Scrape:
    taken_s: float  # wall clock (time.time) when the answer was complete (or given up)
    elapsed_s: float  # how long the server took to answer
    snapshot: MetricsSnapshot | None  # None: no usable answer
    error: str | None = None  # why not, one line
    vllm: bool = True  # the answer had vLLM's metrics (False: some other program's /metrics)
    reached: bool = True  # something answered HTTP at that address (False: refused, timed out)


def metrics_url(url: str) -> str:
    """The ``/metrics`` address of a server URL (given with or without ``/metrics``)."""
    if not re.match(r"https?://", url):
        raise SweetspotError(f"--url {url!r}: expected http://HOST:PORT")
    base = url.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"


def scrape(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> Scrape:
    """One GET of ``url`` (a ``/metrics`` address)."""
    start = time.monotonic()
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            text = answer.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return _failed(start, f"HTTP {exc.code} from {url}")
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
            return _failed(start, f"no answer from {url} in {timeout_s:g} s", reached=False)
        return _failed(start, f"cannot reach {url}: {reason}", reached=False)
    try:
        snapshot = parse_metrics(text)
    except SweetspotError as exc:
        return _failed(start, f"{url}: {exc}", vllm=False)
    names = (*snapshot.counters, *snapshot.gauges, *snapshot.histograms)
    vllm = any(n.startswith(VLLM_PREFIX) for n in names)
    return Scrape(time.time(), time.monotonic() - start, snapshot if vllm else None,
                  None if vllm else f"{url} has no vLLM metrics (no {VLLM_PREFIX}* names)",
                  vllm)


def _failed(start: float, error: str, *, vllm: bool = True, reached: bool = True) -> Scrape:
    return Scrape(time.time(), time.monotonic() - start, None, error, vllm, reached)


@dataclass(frozen=True, slots=True)
class LogEvent:
    kind: str  # "oom" or "engine dead"
    line: str  # the line vLLM wrote


# What the server's log says when a request or the engine dies: CUDA/torch out-of-memory
# errors, and the engine core's fatal error (after which every request fails).
_LOG_RULES = (
    ("oom", re.compile(r"(torch\.)?(cuda\.)?OutOfMemoryError|CUDA out of memory|"
                       r"out of memory", re.IGNORECASE)),
    ("engine dead", re.compile(r"EngineCore encountered a fatal error|EngineDeadError|"
                               r"Engine core proc \S+ died unexpectedly|"
                               r"EngineCore failed to start")),
)


class LogTail:
    """The lines a server's log gained since the last call (from its end at the first call).
    A log that shrank was rotated or rewritten: it is read again from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset: int | None = None
        self._partial = b""

    def events(self) -> list[LogEvent]:
        try:
            size = self.path.stat().st_size
            if self._offset is None:  # history before the watch began is not this watch's
                self._offset = size
            if size < self._offset:
                self._offset, self._partial = 0, b""
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:  # not there (yet): whatever it says once it appears is news
            if self._offset is None:
                self._offset = 0
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        found = []
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").strip()
            kind = next((k for k, pattern in _LOG_RULES if pattern.search(line)), None)
            if kind is not None:
                found.append(LogEvent(kind, line[:300]))
        return found
