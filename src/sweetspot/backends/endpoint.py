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
from typing import TYPE_CHECKING, Any

from sweetspot._errors import SweetspotError
from sweetspot.backends.loadgen import LoadConfig, LoadRun, run_load
from sweetspot.backends.records import RequestRecord
from sweetspot.spec.requests import Request

if TYPE_CHECKING:
    from sweetspot.backends.trial import MoreRuns, Trial

__all__ = ["EndpointBackend", "EndpointRun", "run_endpoint", "scrape_metrics"]


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


class EndpointBackend:
    """Trials against a server that is already running (``tune --backend endpoint``): it serves
    one configuration, which sweetspot can measure but not change, so a trial of any other
    configuration is ``invalid`` and only the configuration it was told the server runs
    (``serving``: the deployment's own command, else vLLM's defaults) is measured. What it is
    for: the goodput capacity of a live deployment (``--strategy rate``)."""

    name = "endpoint"

    def __init__(self, url: str, serving: Any, *, model: str | None = None,
                 scrape_interval_s: float = 0.0,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        import asyncio

        from sweetspot.backends.loadgen import check_server

        self.url = url
        self.serving = serving
        served = asyncio.run(check_server(url, headers=headers))
        if not served:
            raise SweetspotError(f"{url} serves no model")
        if model is not None and model not in served:
            raise SweetspotError(f"{url} does not serve {model!r}; it serves "
                                 f"{', '.join(map(str, served))}")
        self.model = model or str(served[0])
        self.scrape_interval_s = scrape_interval_s

    def run(self, config: Any, requests: Sequence[Request], load: LoadConfig, *,
            more: MoreRuns = ()) -> Trial:
        import dataclasses
        import time

        from sweetspot.backends.trial import (
            Trial,
            TrialTimings,
            every_request_failed,
            further_runs,
        )

        started = time.monotonic()
        if config != self.serving:
            return Trial("invalid", f"{self.url} runs one configuration; sweetspot cannot "
                         "change a server it did not start (tune it with --backend vllm)",
                         None, TrialTimings(total_s=0.0))
        runs: list[EndpointRun] = []
        status, cause = "ok", None
        def one(batch: Sequence[Request], batch_load: LoadConfig) -> bool:
            """Run one batch; False when the trial must stop (its cause recorded)."""
            nonlocal status, cause
            served = dataclasses.replace(batch_load, base_url=self.url, model=self.model)
            try:
                runs.append(run_endpoint(batch, served, scrape_interval_s=self.scrape_interval_s))
            except SweetspotError as exc:
                status, cause = "crash", str(exc)
                return False
            if failed := every_request_failed(runs[-1]):
                status, cause = failed
                return False
            return True

        if one(requests, load):
            for batch, batch_load in further_runs(more, runs[0]):
                if not one(batch, batch_load):
                    break
        total = time.monotonic() - started
        workload = sum(r.duration_s for r in runs) if runs else None
        return Trial(status, cause, runs[0] if runs else None,
                     TrialTimings(workload_s=workload, total_s=total), base_url=self.url,
                     more_runs=tuple(runs[1:]))
