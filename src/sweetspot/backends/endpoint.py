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
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sweetspot._errors import SweetspotError
from sweetspot.backends.base import Run, Server, Target, Trial, TrialTimings
from sweetspot.backends.loadgen import LoadConfig, LoadRun, run_load
from sweetspot.spec.requests import Request

if TYPE_CHECKING:
    from sweetspot.spec.knobs import ServingConfig

__all__ = ["EndpointBackend", "run_endpoint", "scrape_metrics"]


def scrape_metrics(base_url: str, timeout_s: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
            return r.read().decode("utf-8", "replace") if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def run_endpoint(requests: Sequence[Request], config: LoadConfig,
                 on_done: Callable[[], None] | None = None,
                 scrape_interval_s: float = 1.0) -> Run:
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
    return Run(run.records, run.duration_s, run.processes, before, tuple(samples), after)


class EndpointBackend:
    """Trials against a server that is already running (``tune --backend endpoint``): it serves
    one configuration, which sweetspot can measure but not change, so a trial of any other
    configuration is ``invalid`` and only the configuration it was told the server runs
    (``serving``: the deployment's own command, else vLLM's defaults) is measured. What it is
    for: the goodput capacity of a live deployment (``--strategy rate``)."""

    name = "endpoint"
    measured = True

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

    @classmethod
    def for_target(cls, target: Target) -> EndpointBackend:
        return cls(target.options["url"], target.baseline,
                   model=target.options.get("served_model"), headers=target.headers)

    @contextmanager
    def serve(self, config: ServingConfig) -> Iterator[Server]:
        """The running server, when ``config`` is what it serves; else a refused trial."""
        started = time.monotonic()
        server = _Served(self)
        if config != self.serving:
            server.fail("invalid", f"{self.url} runs one configuration; sweetspot cannot "
                        "change a server it did not start (tune it with --backend vllm)")
        try:
            yield server
        finally:
            workload = sum(r.duration_s for r in server.runs) if server.runs else None
            server.close(Trial(server.status, server.cause, tuple(server.runs),
                               TrialTimings(workload_s=workload,
                                            total_s=time.monotonic() - started),
                               base_url=self.url if server.runs or server.ok else None))


class _Served(Server):
    def __init__(self, backend: EndpointBackend) -> None:
        super().__init__()
        self.backend = backend

    def _run(self, requests: Sequence[Request], load: LoadConfig,
             on_done: Callable[[], None] | None) -> Run | None:
        b = self.backend
        # The load generator raises only for the caller's input (a real-time client without the
        # privilege): an exception, as on every backend; an unreachable or dying server shows in
        # the records (every request failed: crash).
        return run_endpoint(requests, replace(load, base_url=b.url, model=b.model), on_done,
                            scrape_interval_s=b.scrape_interval_s)
