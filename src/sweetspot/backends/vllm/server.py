"""Start a vLLM OpenAI-compatible server and always take it down again.

Lifecycle: spawn (own process group, output to a log file) → wait until ``/health`` answers 200
→ yield → stop. The invariant: when ``launch_server`` exits — normally, by an exception or by
KeyboardInterrupt, also during start-up — no process of the server's group is left and its port
accepts a new listener. vLLM runs its engine in child processes of the API server; they share
its process group, so signalling the group reaches them all. Should sweetspot itself be killed
outright (SIGKILL, no cleanup), the server's leader gets SIGTERM from the kernel
(``PR_SET_PDEATHSIG``), and a guard process takes the whole group down even where the server
ignores that while it starts (``guard``: SIGTERM, then SIGKILL).

Where vLLM lives elsewhere — another interpreter (``python``) or a container — a launch
``template`` replaces the interpreter's command line: ``{args}`` becomes the server's options
(shell-quoted, ``--model`` first), ``{host}``, ``{port}``, ``{model}`` and ``{python}`` their
values; the template must keep the server in the foreground and stop it on SIGTERM (e.g.
``docker run --rm --init --network host IMAGE {args}``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.guard import OWNER_ENV, Guard, owner_mark

__all__ = [
    "ServerHandle",
    "ServerStartError",
    "ServerStartTimeout",
    "free_port",
    "launch_server",
    "server_argv",
    "weights_of",
]

# Defaults under the caller's environment and ``env``: a small KV cache (GiB) suits CPU
# machines, and a test or a tuning run must never reach the Hub or report usage.
DEFAULT_ENV: Mapping[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "PYTHONUNBUFFERED": "1",
}
# Random weights: a test's tiny model, or a speed check without the checkpoint. Only on request:
# a tuning run on them says nothing of speculative decoding's acceptance (nor of the model).
DUMMY_WEIGHTS = ("--load-format", "dummy")
_POLL_INTERVAL_S = 0.5
_KILL_GRACE_S = 10.0
_PORT_RELEASE_S = 10.0
_LOG_TAIL_LINES = 30
_ERROR_LINE = re.compile(r"error|exception|exited|failed", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ServerHandle:
    base_url: str  # "http://127.0.0.1:PORT", no trailing slash
    pid: int  # the API server's pid, also its process group's id
    log_path: Path  # the server's stdout and stderr
    started_s: float  # monotonic clock when /health first answered 200
    startup_s: float  # seconds from spawn to that answer
    argv: tuple[str, ...] = ()  # the command that started it
    process: subprocess.Popen | None = field(default=None, compare=False, repr=False)

    def alive(self, grace_s: float = 0.0) -> bool:
        """Whether the server's leader is still running; with ``grace_s``, whether it still runs
        after waiting that long for it to exit (a killed process closes its sockets before it
        can be reaped, so clients can see the connection drop a moment before ``poll`` does)."""
        if self.process is None:
            return False
        if grace_s <= 0:
            return self.process.poll() is None
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return True
        return False


class ServerStartError(SweetspotError):
    """The server exited (or hung) before it became healthy; ``log_tail`` holds its last lines."""

    def __init__(self, message: str, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.log_tail = tuple(log_tail)


class ServerStartTimeout(ServerStartError, TimeoutError):
    """The server did not answer ``/health`` before the start-up deadline."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick); racy, but fine on a test machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def launch_server(
    python: Path | str,
    model_dir: Path | str,
    *,
    tokenizer_dir: Path | str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    log_path: Path | str,
    startup_timeout_s: float = 300.0,
    stop_timeout_s: float = 15.0,
    template: str | None = None,
    on_spawn: Callable[[int], None] | None = None,
    keep_running: bool = False,
    dummy_weights: bool = False,
) -> Iterator[ServerHandle]:
    """Run ``python -m vllm.entrypoints.openai.api_server`` until exit.

    The model's own weights load unless ``dummy_weights`` (``--load-format dummy``: random
    weights, the folder needs only config.json and a tokenizer). ``args`` go after the fixed
    flags, so a ``--load-format`` in them wins. The served model's name is ``str(model_dir)``.
    ``on_spawn(pgid)`` is called right after the process starts. On exit the group gets
    SIGTERM, then SIGKILL after ``stop_timeout_s`` — unless ``keep_running`` and the block
    ended without an exception: then the server is left up, detached, for inspection.
    """
    port = free_port(host) if port is None else port
    log_path = Path(log_path)
    argv = server_argv(python, model_dir, tokenizer_dir=tokenizer_dir, args=args, host=host,
                       port=port, template=template, dummy_weights=dummy_weights)
    base_url = f"http://{host}:{port}"
    process, spawned_s = _spawn(argv, _server_env(env, keep_running), log_path, keep_running)
    keep = False
    guard = None
    try:
        if not keep_running:
            guard = Guard(process.pid, grace_s=stop_timeout_s)
        if on_spawn is not None:
            on_spawn(process.pid)
        started_s = _wait_healthy(process, base_url, log_path, spawned_s + startup_timeout_s)
        yield ServerHandle(
            base_url=base_url, pid=process.pid, log_path=log_path,
            started_s=started_s, startup_s=started_s - spawned_s, argv=tuple(argv),
            process=process,
        )
        keep = keep_running
    finally:
        try:
            if not keep:
                _stop_group(process, stop_timeout_s)
                _wait_port_free(host, port)
        finally:
            if guard is not None:
                guard.release()


def _server_env(env: Mapping[str, str] | None, keep_running: bool) -> dict[str, str]:
    """The server's environment: the defaults under the caller's, under ``env``; marked as
    this process's own unless it is to be left running."""
    full_env = {**DEFAULT_ENV, **os.environ, **(env or {})}
    full_env.pop(OWNER_ENV, None)  # a server started by a server's child is not its
    if not keep_running:  # a server left up on purpose is nobody's orphan
        full_env[OWNER_ENV] = owner_mark()
    return full_env


def _spawn(argv: Sequence[str], full_env: Mapping[str, str], log_path: Path,
           keep_running: bool) -> tuple[subprocess.Popen, float]:
    """Start the server in its own process group, output to ``log_path``; returns the process
    and the monotonic time it was spawned."""
    with open(log_path, "wb") as log:
        spawned_s = time.monotonic()
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=full_env, start_new_session=True,
                preexec_fn=None if keep_running else _die_with_parent(),
            )
        except OSError as exc:
            raise ServerStartError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
    return process, spawned_s


def server_argv(
    python: Path | str,
    model_dir: Path | str,
    *,
    tokenizer_dir: Path | str | None = None,
    args: Sequence[str] = (),
    host: str = "127.0.0.1",
    port: int = 8000,
    template: str | None = None,
    dummy_weights: bool = False,
) -> list[str]:
    """The command that starts the server: the interpreter's, or the launch template's."""
    options = [
        "--model", str(model_dir),
        "--tokenizer", str(tokenizer_dir if tokenizer_dir is not None else model_dir),
        *(DUMMY_WEIGHTS if dummy_weights else ()),
        "--host", host,
        "--port", str(port),
        *args,
    ]
    if template is None:
        return [str(python), "-m", "vllm.entrypoints.openai.api_server", *options]
    try:
        text = template.format(args=shlex.join(options), host=host, port=port,
                               model=shlex.quote(str(model_dir)),
                               python=shlex.quote(str(python)))
        argv = shlex.split(text)
    except (KeyError, IndexError, ValueError) as exc:
        raise SweetspotError(f"bad launch template {template!r}: {exc}; it may use {{args}}, "
                             "{host}, {port}, {model} and {python}") from None
    if not argv:
        raise SweetspotError("the launch template is empty")
    return argv


def weights_of(options: Sequence[str]) -> str:
    """"dummy" when these server options load random weights, else "real" (the model's own):
    the last ``--load-format`` wins, as in vLLM's parser."""
    load_format = None
    words = iter(options)
    for word in words:
        name, eq, value = word.partition("=")
        if name.replace("_", "-") == "--load-format":
            load_format = value if eq else next(words, None)
    return "dummy" if load_format == "dummy" else "real"


_PR_SET_PDEATHSIG = 1


@cache
def _die_with_parent() -> Callable[[], None]:
    """prctl(PR_SET_PDEATHSIG, SIGTERM) for the child, with libc resolved in the parent, not
    between fork and exec."""
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_death_signal


def _wait_healthy(
    process: subprocess.Popen, base_url: str, log_path: Path, deadline_s: float
) -> float:
    while True:
        returncode = process.poll()
        if returncode is not None:
            tail = _log_tail(log_path)
            raise ServerStartError(
                f"vLLM server exited with code {returncode} during start-up: "
                f"{_telling_line(tail)} (log: {log_path})",
                tail,
            )
        if _is_healthy(base_url):
            return time.monotonic()
        if time.monotonic() >= deadline_s:
            tail = _log_tail(log_path)
            raise ServerStartTimeout(
                f"vLLM server not healthy at {base_url} before the start-up deadline; "
                f"last log line: {tail[-1] if tail else 'none'} (log: {log_path})",
                tail,
            )
        time.sleep(_POLL_INTERVAL_S)


def _is_healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):  # refused while starting, 503 once the engine died
        return False


def _stop_group(process: subprocess.Popen, term_grace_s: float) -> None:
    """SIGTERM the group, SIGKILL whatever is left after the grace period, reap the leader."""
    pgid = process.pid  # start_new_session: the leader's pid is the group's id
    _signal_group(pgid, signal.SIGTERM)
    if not _wait_group_gone(process, pgid, term_grace_s):
        _signal_group(pgid, signal.SIGKILL)
        if not _wait_group_gone(process, pgid, _KILL_GRACE_S):
            raise SweetspotError(f"vLLM server's process group {pgid} survived SIGKILL")


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _wait_group_gone(process: subprocess.Popen, pgid: int, timeout_s: float) -> bool:
    deadline_s = time.monotonic() + timeout_s
    while True:
        process.poll()  # reap the leader, else it lingers as our zombie
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline_s:
            return False
        time.sleep(0.1)


def _wait_port_free(host: str, port: int) -> None:
    deadline_s = time.monotonic() + _PORT_RELEASE_S
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # Like uvicorn's own socket: TIME_WAIT leftovers do not count as taken.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                return
            except OSError as exc:
                if time.monotonic() >= deadline_s:
                    raise SweetspotError(
                        f"port {port} still taken after the server stopped"
                    ) from exc
        time.sleep(0.1)


def _log_tail(log_path: Path) -> list[str]:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return lines[-_LOG_TAIL_LINES:]


def _telling_line(tail: Sequence[str]) -> str:
    """The last line that names an error, else the last line: the one-line reason."""
    for line in reversed(tail):
        if _ERROR_LINE.search(line):
            return line.strip()
    return tail[-1].strip() if tail else "no output"
