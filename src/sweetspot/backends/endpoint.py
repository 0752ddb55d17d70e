"""An already-running OpenAI-compatible server (vLLM or not): send a workload, and read the
server's ``/metrics`` before, during and after the run.

Sampling during the run (for peak KV usage and queue length) costs the server some CPU — on a
small CPU server enough to move latencies by a few percent — so its interval is a parameter; 0
keeps only the scrapes before and after. Scrapes run in a small thread with the standard
library's HTTP client, so they never share the load generator's event loop (a slow scrape cannot
delay a send). A server without ``/metrics`` simply yields no server-side facts.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sweetspot.backends.loadgen import LoadConfig, LoadRun, run_load
from sweetspot.backends.records import RequestRecord
from sweetspot.spec.requests import Request

__all__ = ["EndpointRun", "run_endpoint", "scrape_metrics"]


@dataclass(frozen=True, slots=True)
class EndpointRun:
    records: tuple[RequestRecord, ...]
    duration_s: float
    processes: int  # client processes that sent the load
    metrics_before: str | None  # /metrics text, None when the server has none
    metrics_samples: tuple[str, ...]  # scraped every scrape_interval_s during the run
    metrics_after: str | None


def scrape_metrics(base_url: str, timeout_s: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
            return r.read().decode("utf-8", "replace") if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def run_endpoint(requests: Sequence[Request], config: LoadConfig,
                 on_done: Callable[[], None] | None = None,
                 scrape_interval_s: float = 1.0) -> EndpointRun:
    before = scrape_metrics(config.base_url)
    samples: list[str] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(scrape_interval_s):
            text = scrape_metrics(config.base_url)
            if text is not None:
                samples.append(text)

    sampler = threading.Thread(target=sample, name="sweetspot-metrics", daemon=True)
    if before is not None and scrape_interval_s > 0:
        sampler.start()
    try:
        run: LoadRun = run_load(requests, config, on_done)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
    after = scrape_metrics(config.base_url) if before is not None else None
    return EndpointRun(run.records, run.duration_s, run.processes, before, tuple(samples),
                       after)
