"""A launched vLLM server as the ``Backend`` seam's ``Server``: its runs, the run deadline,
how it failed, and the trial it makes once stopped (``VllmBackend.serve_args`` launches it).

A run that leaves the server dead is the trial's failure, classified by the log (``oom`` or
``crash``); a run past the deadline is ``timeout`` (the watchdog killed the server's group, so
every open request failed at once and the load generator returned).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sweetspot.backends.base import (
    Run,
    Server,
    Trial,
    TrialTimings,
    facts_with_memory,
)
from sweetspot.backends.endpoint import run_endpoint
from sweetspot.backends.loadgen import LoadConfig, run_load
from sweetspot.backends.vllm.logs import classify_failure, parse_startup
from sweetspot.backends.vllm.server import ServerHandle, _signal_group
from sweetspot.spec.requests import Request

if TYPE_CHECKING:
    from sweetspot.backends.vllm.backend import VllmBackend

__all__ = ["Phases", "VllmServer", "one_line", "read_log", "refused"]


class VllmServer(Server):
    """A launched server (or one that failed to launch) and its runs."""

    def __init__(self, backend: VllmBackend, phase: Phases, log_path: Path,
                 scrape_interval_s: float) -> None:
        super().__init__()
        self.backend, self.phase, self.log_path = backend, phase, log_path
        self.scrape_interval_s = scrape_interval_s
        self.handle: ServerHandle | None = None
        self.watchdog: _Watchdog | None = None

    def started(self, handle: ServerHandle) -> None:
        self.handle = handle
        self.phase.startup_s = handle.startup_s
        self.watchdog = _Watchdog(handle.pid, self.backend.run_timeout_s)

    def _run(self, requests: Sequence[Request], load: LoadConfig,
             on_done: Callable[[], None] | None) -> Run | None:
        handle, watchdog = self.handle, self.watchdog
        assert handle is not None and watchdog is not None  # a failed start is not ok
        served = self._served(load, handle)
        if self.phase.warmup_s is None:
            warm_s = time.monotonic()
            if self.backend.warmup_requests and requests:
                run_load([Request(-1 - i, 0.0, requests[0].prompt_token_ids, 16)
                          for i in range(self.backend.warmup_requests)], served)
            self.phase.warmup_s = time.monotonic() - warm_s
        run = run_endpoint(requests, served, on_done, scrape_interval_s=self.scrape_interval_s)
        failed = any(rec.error for rec in run.records)
        if watchdog.fired:
            self.fail("timeout", "the workload ran past the run deadline of "
                      f"{self.backend.run_timeout_s:g} s")
        # Requests that failed may mean a dying server: give it a moment to be seen dead.
        elif not handle.alive(grace_s=_DEATH_GRACE_S if failed else 0.0):
            failure = classify_failure(read_log(self.log_path))
            self.fail("oom" if failure.status == "oom" else "crash",
                      f"the server died during the run: {failure.cause}", failure.lines)
        return run

    def _served(self, load: LoadConfig, handle: ServerHandle) -> LoadConfig:
        """``load`` aimed at the launched server, with the API key it was started with (its
        ``--api-key`` or ``VLLM_API_KEY``) unless the load brings its own."""
        headers = load.headers
        key = _api_key(handle.argv) or self.backend.env.get("VLLM_API_KEY")
        if key and not any(name.lower() == "authorization" for name, _ in headers):
            headers = (("Authorization", f"Bearer {key}"), *headers)
        return dataclasses.replace(load, base_url=handle.base_url, model=self.backend.model_dir,
                                   warmup_requests=0, headers=headers)

    def stopping(self) -> None:
        """The caller is done: no deadline from here on, and the clock of the teardown starts."""
        if self.watchdog is not None:
            self.watchdog.cancel()
        self.phase.stopping_s = time.monotonic()

    def trial_of(self, args: Sequence[str], memory, pids: tuple[int, ...], pgid: int | None,
                 *, kept: bool) -> Trial:
        phase, handle, b = self.phase, self.handle, self.backend
        facts = facts_with_memory(parse_startup(read_log(self.log_path)), memory)
        common = dict(log_lines=self.log_lines, log_path=self.log_path,
                      vllm_version=str(b.version), server=facts, server_pids=pids,
                      weights=b.weights(args))
        if handle is None:  # it never served
            timings = TrialTimings(check_s=phase.check_s, startup_s=phase.startup_s,
                                   total_s=time.monotonic() - phase.started_s)
            return Trial(self.status, self.cause, (), timings, server_pid=pgid, **common)
        timings = TrialTimings(
            check_s=phase.check_s, startup_s=phase.startup_s, warmup_s=phase.warmup_s,
            workload_s=sum(r.duration_s for r in self.runs) if self.runs else None,
            teardown_s=None if kept else (phase.stopped_s or 0) - (phase.stopping_s or 0),
            total_s=time.monotonic() - phase.started_s)
        return Trial(self.status, self.cause, tuple(self.runs), timings, argv=handle.argv,
                     base_url=handle.base_url, server_pid=handle.pid, kept=kept, **common)


@dataclasses.dataclass
class Phases:
    started_s: float
    check_s: float | None = None
    startup_s: float | None = None
    warmup_s: float | None = None
    stopping_s: float | None = None
    stopped_s: float | None = None


_DEATH_GRACE_S = 2.0


class _Watchdog:
    """Kills the server's group when the run deadline passes, so every open request fails at
    once and the load generator returns."""

    def __init__(self, pgid: int, timeout_s: float | None) -> None:
        self.fired = False
        self._timer = None
        if timeout_s is not None:
            self._timer = threading.Timer(timeout_s, self._fire, args=(pgid,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, pgid: int) -> None:
        import signal

        self.fired = True
        _signal_group(pgid, signal.SIGKILL)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


@contextmanager
def refused(cause: str, lines: tuple[str, ...], started_s: float,
             version: str) -> Iterator[Server]:
    """A server vLLM would refuse to start: nothing runs, and nothing was started."""
    server = Server()
    server.fail("invalid", cause, lines)
    try:
        yield server
    finally:
        server.close(Trial("invalid", cause, (), TrialTimings(
            total_s=time.monotonic() - started_s), log_lines=lines, vllm_version=version))


def _api_key(argv: Sequence[str]) -> str | None:
    """The value of the last ``--api-key`` in a server's command line (vLLM's own rule)."""
    key = None
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            key = argv[i + 1]
        elif arg.startswith("--api-key="):
            key = arg.split("=", 1)[1]
    return key


def read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
