"""One trial: a configuration run against a workload, by any backend, and how it ended.

Every backend — the simulator, a real vLLM server, an existing endpoint — returns a ``Trial``.
A failed trial is a result, not an exception: ``status`` says how it ended and ``cause`` why, in
the server's own words where it spoke. The per-request records and ``/metrics`` texts sit in
``run`` (an ``EndpointRun``) for the one metrics function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from sweetspot._secrets import redact_args
from sweetspot.backends.endpoint import EndpointRun

if TYPE_CHECKING:  # the real-server backend builds trials, so it imports this module
    from sweetspot.backends.loadgen import LoadConfig
    from sweetspot.backends.vllm.logs import StartupFacts
    from sweetspot.backends.vllm.memory import MemoryPeaks
    from sweetspot.spec.requests import Request

__all__ = ["STATUSES", "MoreRuns", "Trial", "TrialTimings", "every_request_failed",
           "further_runs"]

# Further workloads a trial runs on its server after the first, in order: given up front, or
# decided from the first run (``--rate auto``: the baseline's traffic is offered at a share of
# the capacity its own first run measured, so one server start serves both).
Runs: TypeAlias = "Sequence[tuple[Sequence[Request], LoadConfig]]"
MoreRuns: TypeAlias = "Runs | Callable[[EndpointRun], Runs]"


def every_request_failed(run: EndpointRun | None) -> tuple[str, str] | None:
    """(status, cause) when every request of ``run`` failed — ``auth`` when the server refused
    them all (HTTP 401/403), else ``crash`` — never an "ok" run of zero latencies; None when
    some request got through (or there was none)."""
    from sweetspot.backends.loadgen import AUTH_HINT, AUTH_STATUSES

    if run is None or not run.records or any(r.error is None for r in run.records):
        return None
    first = run.records[0].error
    if all(r.error.startswith(tuple(f"HTTP {s}" for s in AUTH_STATUSES)) for r in run.records):
        return "auth", f"every request was refused ({first}); {AUTH_HINT}"
    return "crash", f"every request failed: {first}"


def further_runs(more: MoreRuns, first: EndpointRun | None) -> Runs:
    """``more`` as runs: called with the first run when it is a function (none without one)."""
    if callable(more):
        return () if first is None else more(first)
    return more

# ok: the workload ran (single requests may still have failed: see the records).
# oom: the server could not hold the model or its KV cache; invalid: vLLM (or sweetspot's
# knowledge of it) refused the configuration; crash: the server died; timeout: a deadline passed.
# auth: the server refused every request (HTTP 401/403: it wants an API key).
STATUSES = ("ok", "oom", "invalid", "crash", "timeout", "auth")


@dataclass(frozen=True, slots=True)
class TrialTimings:
    """Where a trial's wall time went (seconds); None for phases it never reached."""

    check_s: float | None = None  # checking the options (reading vLLM's parser the first time)
    startup_s: float | None = None  # spawn to the first healthy answer
    warmup_s: float | None = None  # warm-up requests
    workload_s: float | None = None  # the measured run, first send to last byte
    teardown_s: float | None = None  # stop signal to port (and device memory) free
    total_s: float = 0.0  # everything, validation included

    @property
    def overhead_s(self) -> float:
        """What the trial cost beyond the workload itself."""
        return self.total_s - (self.workload_s or 0.0)


@dataclass(frozen=True, slots=True)
class Trial:
    status: str  # one of STATUSES
    cause: str | None  # one line; None when ok
    run: EndpointRun | None  # records and /metrics; None when the workload never ran
    timings: TrialTimings
    argv: tuple[str, ...] = ()  # the server's command line, when one was (to be) started
    log_lines: tuple[str, ...] = ()  # the decisive log lines of a failure, with context
    log_path: Path | None = None
    vllm_version: str | None = None
    startup: StartupFacts | None = None  # what the server logged while starting
    memory: MemoryPeaks | None = None  # peaks sampled while it ran
    base_url: str | None = None  # where the server answered (still does if it was kept)
    server_pid: int | None = None  # the server's process group id
    server_pids: tuple[int, ...] = ()  # every process seen in that group
    kept: bool = False  # the server was left running (--keep-server)
    facts: dict[str, Any] = field(default_factory=dict)  # backend-specific counters (simulator)
    more_runs: tuple[EndpointRun, ...] = ()  # further workloads run on the same server, in order
    # "dummy" (random, --load-format dummy) or "real" (the model's own); None: no server of
    # sweetspot's was started (the simulator, a running endpoint, refused options)
    weights: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Everything but the records and /metrics texts, JSON-ready."""
        return {
            "status": self.status,
            "cause": self.cause,
            "log_lines": list(self.log_lines),
            "argv": redact_args(self.argv),  # never a key (--api-key K)
            "log_path": str(self.log_path) if self.log_path else None,
            "vllm_version": self.vllm_version,
            "timings": {**asdict(self.timings), "overhead_s": self.timings.overhead_s},
            "startup": asdict(self.startup) if self.startup else None,
            "memory": asdict(self.memory) if self.memory else None,
            "base_url": self.base_url,
            "server_pid": self.server_pid,
            "server_pids": list(self.server_pids),
            "kept": self.kept,
            "weights": self.weights,
            "facts": dict(self.facts),
        }
