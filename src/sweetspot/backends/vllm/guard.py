"""A launched server dies with sweetspot, however sweetspot dies.

``PR_SET_PDEATHSIG`` sends the server's leader SIGTERM when sweetspot dies, but a vLLM server
busy starting (loading, warming up) may not act on it: two of seven SIGKILLs of sweetspot during
start-up left a healthy server holding its port and its workers' for over ten minutes. Two more
lines of defence:

- **a guard per server**: a tiny process in its own session that blocks on a pipe whose only
  writer is sweetspot. sweetspot writes ``done`` once it has stopped the server itself (or keeps
  it on purpose); end of file without it means sweetspot died, and the guard takes the server's
  process group down: SIGTERM, then SIGKILL after a grace period. It ignores the signals a
  terminal or a kill of sweetspot's own group would send it, and runs with ``-I`` on the
  interpreter's standard library alone, so it starts in milliseconds.
- **reaping**: every server sweetspot starts carries ``SWEETSPOT_OWNER=<pid>:<start time>`` in its
  environment. ``reap_orphans`` (run when ``tune`` and ``bench --launch`` start) finds processes
  whose owner is no longer alive — a guard killed too, by ``kill -9 -1`` or the OOM killer — and
  stops their groups, naming them. A server kept on purpose (``--keep-server``) carries no owner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OWNER_ENV", "Guard", "Reaped", "owner_mark", "reap_orphans"]

OWNER_ENV = "SWEETSPOT_OWNER"
TRIAL_ENV = "SWEETSPOT_TRIAL"  # the trial's folder, set by the real-server backend
GRACE_S = 10.0
_DONE = b"done"

# The guard's whole program: argv[1] the group, argv[2] the pipe's read end, argv[3] the grace.
_GUARD = """
import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
pgid, fd, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
data = b""
while True:
    try:
        chunk = os.read(fd, 64)
    except InterruptedError:
        continue
    if not chunk:
        break
    data += chunk
if b"done" in data:
    sys.exit(0)
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        sys.exit(0)
    end = time.monotonic() + wait
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    if not alive():
        sys.exit(0)
sys.exit(1)
"""


class Guard:
    """The guard of the process group ``pgid``: started at once; ``release()`` when sweetspot
    has stopped (or keeps) the server itself."""

    def __init__(self, pgid: int, grace_s: float = GRACE_S) -> None:
        read_end, self._write_end = os.pipe()  # both close on exec: only read_end is passed
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-c", _GUARD, str(pgid), str(read_end), str(grace_s)],
                pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    @property
    def pid(self) -> int:
        return self._process.pid

    def release(self) -> None:
        """The server is sweetspot's business again: the guard exits without a signal."""
        if self._write_end < 0:
            return
        with suppress(OSError):
            os.write(self._write_end, _DONE)
        os.close(self._write_end)
        self._write_end = -1
        with suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)


def owner_mark(pid: int | None = None) -> str:
    """``<pid>:<start time in clock ticks>`` of ``pid`` (this process): a pid alone could be
    reused by an unrelated process once the owner died."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_ticks(pid)}"


def _start_ticks(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command's name


def owner_alive(mark: str) -> bool:
    """The process ``mark`` (``owner_mark``) names still runs (on this host)."""
    pid_text, _, ticks = mark.partition(":")
    if not pid_text.isdigit():
        return True  # not ours to judge
    return _start_ticks(int(pid_text)) == ticks


@dataclass(frozen=True, slots=True)
class Reaped:
    pgid: int
    pids: tuple[int, ...]
    trial: str | None  # the trial folder the server was started for

    def describe(self) -> str:
        where = f" for {self.trial}" if self.trial else ""
        return (f"stopped a vLLM server left by a killed sweetspot{where} "
                f"(process group {self.pgid}, {len(self.pids)} processes)")


def reap_orphans(grace_s: float = GRACE_S) -> list[Reaped]:
    """Stop the process groups of servers whose owning sweetspot is gone (see the module's
    text); what was stopped, one entry per group."""
    groups: dict[int, tuple[list[int], str | None]] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        env = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        mark = env.get(OWNER_ENV.encode())
        if mark is None or owner_alive(mark.decode(errors="replace")):
            continue
        pid = int(entry.name)
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        trial = env.get(TRIAL_ENV.encode())
        pids, _ = groups.setdefault(pgid, ([], trial.decode(errors="replace") if trial else None))
        pids.append(pid)
    reaped = []
    for pgid, (pids, trial) in groups.items():
        _stop(pgid, grace_s)
        reaped.append(Reaped(pgid, tuple(sorted(pids)), trial))
    return reaped


def _stop(pgid: int, grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
