"""The seam between the search and what it measures: a ``Backend`` serves one configuration at
a time, and workloads run on the served configuration, in order.

    with backend.serve(config) as server:   # started here (or refused: see below)
        first = server.run(requests, load)   # a Run; None once the server has failed
        ...                                  # capacity, traffic, a rate ladder: same server
    trial = server.trial                     # stopped: how it went, every run, what it showed

A server that could not start is still a server: it says why (``status``, ``cause``), each of
its runs returns None, and its trial says the same. A failed trial is a result, never an
exception; exceptions are the caller's input (no vLLM to run, a folder that cannot be made) and
interruptions, and the server is stopped before they leave ``serve``. Every backend — the
simulator, real vLLM servers, a running endpoint, a test's fake — implements this, and
``tests/backends/test_contract.py`` checks each one the same way.

``ServerFacts`` is what a served configuration showed of itself, whichever backend served it:
a real server's start-up log and sampled memory, the simulator's memory model. Each backend
fills what it knows and leaves the rest None.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_args
from sweetspot.backends.records import RequestRecord

if TYPE_CHECKING:
    from sweetspot.backends.loadgen import LoadConfig
    from sweetspot.spec.knobs import ServingConfig
    from sweetspot.spec.requests import Request

__all__ = ["BACKENDS", "FAILURES", "STATUSES", "Backend", "MemoryPeaks", "Run", "Server",
           "ServerFacts", "Target", "Trial", "TrialTimings", "backend_for", "every_request_failed",
           "facts_with_memory", "run_in_order"]

# ok: the workloads ran (single requests may still have failed: see the records).
# oom: the server could not hold the model or its KV cache; invalid: vLLM (or sweetspot's
# knowledge of it) refused the configuration; crash: the server died; timeout: a deadline passed.
# auth: the server refused every request (HTTP 401/403: it wants an API key).
STATUSES = ("ok", "oom", "invalid", "crash", "timeout", "auth")
FAILURES = STATUSES[1:]


@dataclass(frozen=True, slots=True)
class Run:
    """One workload on a served configuration: the client's records and the server's
    ``/metrics`` texts (None where it has none, as the simulator)."""

    records: tuple[RequestRecord, ...]
    duration_s: float  # first send to last byte
    processes: int = 0  # client processes that sent the load (0: none, the simulator)
    metrics_before: str | None = None
    metrics_samples: tuple[str, ...] = ()  # scraped at intervals during the run
    metrics_after: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryPeaks:
    """Memory a served configuration held at its peak (bytes)."""

    host_rss_bytes: int | None  # peak sum of RSS over the server's processes
    device_bytes: int | None  # peak device memory held by the server's processes
    device_used_bytes: int | None  # peak device memory in use on all devices
    device_baseline_bytes: int | None  # in use before the server started
    samples: int  # 0: modelled, not sampled

    @property
    def held_bytes(self) -> int | None:
        """The server's own peak: device memory where it had a device, else host RSS."""
        return self.device_bytes if self.device_bytes is not None else self.host_rss_bytes


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What a served configuration showed of itself; None where its backend cannot tell."""

    kv_cache_tokens: int | None = None  # tokens the KV cache holds
    max_concurrency: float | None = None  # requests of max_model_len that fit at once
    max_model_len: int | None = None  # the length max_concurrency refers to
    kv_cache_bytes: int | None = None
    model_load_bytes: int | None = None  # the weights as loaded
    model_load_s: float | None = None
    device: str | None = None  # "GPU", "CPU", ... where the KV cache lives
    engine_init_s: float | None = None  # profiling, KV cache allocation, warm-up/graphs
    memory: MemoryPeaks | None = None  # peaks while it was served

    def startup_dict(self) -> dict[str, Any]:
        """The start-up facts (all but memory), JSON-ready."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "memory"}


@dataclass(frozen=True, slots=True)
class TrialTimings:
    """Where a trial's wall time went (seconds); None for phases it never reached."""

    check_s: float | None = None  # checking the options (reading vLLM's parser the first time)
    startup_s: float | None = None  # spawn to the first healthy answer
    warmup_s: float | None = None  # warm-up requests
    workload_s: float | None = None  # the runs, first send to last byte, summed
    teardown_s: float | None = None  # stop signal to port (and device memory) free
    total_s: float = 0.0  # everything, validation included

    @property
    def overhead_s(self) -> float:
        """What the trial cost beyond the workload itself."""
        return self.total_s - (self.workload_s or 0.0)


@dataclass(frozen=True, slots=True)
class Trial:
    """One configuration served, its runs in order, and how it ended."""

    status: str  # one of STATUSES
    cause: str | None  # one line, in the server's own words where it spoke; None when ok
    runs: tuple[Run, ...]  # the runs that completed, in order (none: it never served)
    timings: TrialTimings
    server: ServerFacts = ServerFacts()
    # What the backend counted beyond the records (the simulator's preemptions, batch, ...)
    counters: Mapping[str, Any] = field(default_factory=dict)
    argv: tuple[str, ...] = ()  # the server's command line, when one was (to be) started
    log_lines: tuple[str, ...] = ()  # the decisive log lines of a failure, with context
    log_path: Path | None = None
    vllm_version: str | None = None
    base_url: str | None = None  # where the server answered (still does if it was kept)
    server_pid: int | None = None  # the server's process group id
    server_pids: tuple[int, ...] = ()  # every process seen in that group
    kept: bool = False  # the server was left running (--keep-server)
    # "dummy" (random, --load-format dummy) or "real" (the model's own); None: no server of
    # sweetspot's was started (the simulator, a running endpoint, refused options)
    weights: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def run(self) -> Run | None:
        """The first run (None when none completed)."""
        return self.runs[0] if self.runs else None

    def to_dict(self) -> dict[str, Any]:
        """Everything but the records and /metrics texts, JSON-ready."""
        memory = self.server.memory
        return {
            "status": self.status,
            "cause": self.cause,
            "log_lines": list(self.log_lines),
            "argv": redact_args(self.argv),  # never a key (--api-key K)
            "log_path": str(self.log_path) if self.log_path else None,
            "vllm_version": self.vllm_version,
            "timings": {**asdict(self.timings), "overhead_s": self.timings.overhead_s},
            "startup": self.server.startup_dict() if self.server != ServerFacts() else None,
            "memory": asdict(memory) if memory else None,
            "base_url": self.base_url,
            "server_pid": self.server_pid,
            "server_pids": list(self.server_pids),
            "kept": self.kept,
            "weights": self.weights,
            "facts": dict(self.counters),
        }


def every_request_failed(run: Run | None) -> tuple[str, str] | None:
    """(status, cause) when every request of ``run`` failed — ``auth`` when the server refused
    them all (HTTP 401/403), else ``crash`` — never an "ok" run of zero latencies; None when
    some request got through (or there was none)."""
    from sweetspot.backends.loadgen import AUTH_HINT, AUTH_STATUSES

    if run is None or not run.records or any(r.error is None for r in run.records):
        return None
    first = run.records[0].error
    refused = tuple(f"HTTP {s}" for s in AUTH_STATUSES)
    if all(r.error is not None and r.error.startswith(refused) for r in run.records):
        return "auth", f"every request was refused ({first}); {AUTH_HINT}"
    return "crash", f"every request failed: {first}"


class Server:
    """One configuration being served. Backends subclass it and write ``_run``; the rules
    every backend shares live here: the first failure is the one reported, a failed server runs
    nothing more, and a run in which every request failed fails the server (its status
    ``auth`` or ``crash``)."""

    def __init__(self) -> None:
        self.status = "ok"
        self.cause: str | None = None
        self.log_lines: tuple[str, ...] = ()
        self.runs: list[Run] = []
        self._trial: Trial | None = None

    @property
    def ok(self) -> bool:
        """Still serving: started and not failed since."""
        return self.status == "ok"

    def fail(self, status: str, cause: str, lines: Sequence[str] = ()) -> None:
        """Record a failure; the first one stands."""
        if status not in FAILURES:
            raise ValueError(f"not a failure status: {status!r}")
        if self.ok:
            self.status, self.cause, self.log_lines = status, cause, tuple(lines)

    def run(self, requests: Sequence[Request], load: LoadConfig,
            on_done: Callable[[], None] | None = None) -> Run | None:
        """``requests`` sent as ``load`` says (its URL and model are the server's); the run, or
        None when the server had failed or failed during it (``status`` says how). No requests
        is the caller's mistake: a ``SweetspotError``, whichever backend serves."""
        if not requests:
            raise SweetspotError("no requests to send")
        if not self.ok:
            return None
        run = self._run(requests, load, on_done)
        if run is None:
            return None
        self.runs.append(run)
        if failed := every_request_failed(run):
            self.fail(*failed)
            return None
        return run if self.ok else None

    def _run(self, requests: Sequence[Request], load: LoadConfig,
             on_done: Callable[[], None] | None) -> Run | None:
        raise NotImplementedError

    @property
    def trial(self) -> Trial:
        """The whole trial, once ``serve``'s block has ended."""
        if self._trial is None:
            raise RuntimeError("the server is still being served: its trial comes at the end")
        return self._trial

    def close(self, trial: Trial) -> None:
        """Called by the backend when the server has stopped."""
        self._trial = trial


class Backend(Protocol):
    """Where trials run; see the module docstring for the lifecycle."""

    name: str  # its name in the registry (``BACKENDS``)
    measured: bool  # real servers measured by a client (not predicted)

    def serve(self, config: ServingConfig) -> AbstractContextManager[Server]: ...


def run_in_order(backend: Backend, config: ServingConfig,
                 runs: Sequence[tuple[Sequence[Request], LoadConfig]]) -> Trial:
    """One trial of ``config`` running ``runs`` in order on one server, stopping at a failure."""
    with backend.serve(config) as server:
        for requests, load in runs:
            if server.run(requests, load) is None:
                break
    return server.trial


@dataclass(frozen=True)
class Target:
    """What a study asks of its backend: the specs every trial is built from and the
    backend's own options (the study settings' ``vllm`` table)."""

    setup: Any  # backends.sim.SimSetup: hardware, model architecture, quantisation, release
    model_ref: str  # the model folder or name a server loads
    baseline: ServingConfig  # the configuration a running endpoint is known to serve
    options: Mapping[str, Any] = field(default_factory=dict)
    vllm_version: str | None = None
    seed: int = 0
    calibration: str | None = None  # a calibration file for the simulator
    headers: tuple[tuple[str, str], ...] = ()  # with every request (an endpoint's API key)


# The registry: a backend's name -> the class that serves it, imported only when asked for
# (the simulator's users never import the real-server code, nor it the simulator's).
BACKENDS = {
    "sim": "sweetspot.backends.sim.backend:SimBackend",
    "vllm": "sweetspot.backends.vllm.backend:VllmBackend",
    "endpoint": "sweetspot.backends.endpoint:EndpointBackend",
}


def backend_for(name: str, target: Target) -> Backend:
    """The backend called ``name``, built for ``target`` by its ``for_target``."""
    if name not in BACKENDS:
        raise SweetspotError(f"unknown backend {name!r}; one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    backend: Backend = getattr(importlib.import_module(module), cls).for_target(target)
    return backend


def facts_with_memory(facts: ServerFacts | None, memory: MemoryPeaks | None) -> ServerFacts:
    """``facts`` (none: empty) with the memory peaks set."""
    return replace(facts or ServerFacts(), memory=memory)
