"""A launched server dies with sweetspot however sweetspot dies; orphans are reaped.

A stand-in ``vllm.entrypoints.openai.api_server`` on PYTHONPATH plays a server busy starting:
it ignores SIGTERM (as a vLLM warming up did after a SIGKILL of sweetspot: PR_SET_PDEATHSIG's
SIGTERM alone left it running), has a child of its own, and never answers /health.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sweetspot.backends.vllm.guard import OWNER_ENV, TRIAL_ENV, owner_mark, reap_orphans
from sweetspot.backends.vllm.server import launch_server

STARTING = textwrap.dedent("""\
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print("loading weights", flush=True)
    time.sleep(600)
""")

SWEETSPOT = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from sweetspot.backends.vllm.server import launch_server
    folder = Path(sys.argv[1])
    with launch_server(sys.executable, folder, env={"PYTHONPATH": sys.argv[2]},
                       log_path=folder / "server.log", stop_timeout_s=1.0,
                       startup_timeout_s=600,
                       on_spawn=lambda pgid: print(pgid, flush=True)):
        pass
""")


def _fake_vllm(tmp_path: Path) -> Path:
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(STARTING)
    return tmp_path / "fake"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_server_still_starting_dies_with_a_killed_sweetspot(tmp_path: Path) -> None:
    fake = _fake_vllm(tmp_path)
    src = Path(__file__).resolve().parents[3] / "src"
    sweetspot = subprocess.Popen(
        [sys.executable, "-c", SWEETSPOT, str(tmp_path), str(fake)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    try:
        pgid = int(sweetspot.stdout.readline())
        deadline = time.monotonic() + 30
        while "loading weights" not in (tmp_path / "server.log").read_text():
            assert time.monotonic() < deadline, "the stand-in never started"
            time.sleep(0.1)
        assert _group_alive(pgid)
        assert _guards_of(pgid), "no guard watches the server"
        sweetspot.kill()  # SIGKILL: no clean-up of sweetspot's own runs
        sweetspot.wait()
        assert _wait_gone(pgid, 20), "the server outlived sweetspot"
    finally:
        if sweetspot.poll() is None:
            sweetspot.kill()
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_server_stopped_by_sweetspot_leaves_no_guard(tmp_path: Path) -> None:
    """The normal way out: sweetspot stops the group itself and releases the guard."""
    fake = _fake_vllm(tmp_path)
    spawned: list[int] = []
    with pytest.raises(TimeoutError), launch_server(
            sys.executable, tmp_path, env={"PYTHONPATH": str(fake)},
            log_path=tmp_path / "server.log", stop_timeout_s=0.5, startup_timeout_s=2,
            on_spawn=spawned.append):
        pytest.fail("the stand-in never answers /health")
    assert spawned and not _group_alive(spawned[0])
    assert not _guards_of(spawned[0])


def _guards_of(pgid: int) -> list[int]:
    """Guard processes watching the group ``pgid`` (their command line names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-I" in argv and any(b"killpg" in a for a in argv) and \
                    str(pgid).encode() in argv:
                found.append(int(entry.name))
    return found


def test_orphans_of_a_dead_sweetspot_are_reaped_and_named(tmp_path: Path) -> None:
    sleeper = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "time.sleep(600)")

    class Orphan:
        """A process in its own group whose parent has gone (as a killed sweetspot's server
        is): the shell that started it exits at once."""

        def __init__(self, env: dict[str, str]) -> None:
            shell = subprocess.run(
                ["sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(sleeper)} "
                             "</dev/null >/dev/null 2>&1 & echo $!"],
                capture_output=True, text=True, env={**os.environ, **env},
                start_new_session=True, check=True)
            self.pid = int(shell.stdout)

        def alive(self) -> bool:
            try:
                state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                return False
            return state != "Z"

        def kill(self) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    spawn = Orphan

    orphan = spawn({OWNER_ENV: "999999999:1", TRIAL_ENV: str(tmp_path / "trial-0007")})
    owned = spawn({OWNER_ENV: owner_mark()})  # its owner (this test) is alive
    kept = spawn({})  # --keep-server: nobody's orphan
    try:
        time.sleep(0.5)  # their environments are readable once they exec'd
        reaped = reap_orphans(grace_s=0.5)
        ours = [r for r in reaped if orphan.pid in r.pids]
        assert len(ours) == 1 and ours[0].trial == str(tmp_path / "trial-0007")
        assert "trial-0007" in ours[0].describe() and "killed sweetspot" in ours[0].describe()
        assert not orphan.alive()  # it ignored SIGTERM: SIGKILL after the grace
        assert owned.alive() and kept.alive()
        assert not {owned.pid, kept.pid} & {pid for r in reaped for pid in r.pids}
    finally:
        for p in (orphan, owned, kept):
            p.kill()
