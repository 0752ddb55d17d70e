"""Debian's ``prometheus`` package (``prometheus`` and ``promtool``) for the tests of the
Prometheus exports and launcher: fixtures ``promtool`` and ``prometheus_binary`` (a test module
or conftest imports them).

When either binary is missing the set-up installs the package with apt-get, as the README says
(root and network; ``apt-get update`` first when the lists are stale), and fails, never skips,
when it cannot: CI has to prove the rules load. One install at a time (pytest-xdist workers
share a lock file). The package enables a ``prometheus`` service and, where services may start,
starts one: right after installing, the set-up disables it and stops any Prometheus the install
started, so nothing is left running.
"""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from tests.apt import apt_env, apt_install, run

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
LOCK = Path(tempfile.gettempdir()) / "sweetspot-apt-prometheus.lock"


@pytest.fixture(scope="session")
def promtool() -> Path:
    ensure_prometheus()
    return PROMTOOL


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    ensure_prometheus()
    return PROMETHEUS


def ensure_prometheus() -> None:
    if PROMETHEUS.exists() and PROMTOOL.exists():
        return
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it
        if PROMETHEUS.exists() and PROMTOOL.exists():
            return
        before = prometheus_processes()
        env = apt_env()
        done = apt_install("prometheus")
        _no_service(before, env)
    if not (PROMETHEUS.exists() and PROMTOOL.exists()):
        pytest.fail(f"the rules tests need Debian's prometheus package ({PROMETHEUS}, "
                    f"{PROMTOOL}) and `apt-get install -y prometheus` failed (exit "
                    f"{done.returncode}; it needs root and network):\n{done.stdout[-2000:]}\n"
                    f"{done.stderr[-2000:]}")


def _no_service(before: set[int], env: dict[str, str]) -> None:
    """Disable the service the package enabled and stop what the install started."""
    run(["systemctl", "disable", "--now", "prometheus"], env)  # stops it under systemd
    run(["update-rc.d", "prometheus", "disable"], env)
    if not Path("/run/systemd/system").exists():
        run(["/etc/init.d/prometheus", "stop"], env)
    started = prometheus_processes() - before
    for pid in started:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while (left := prometheus_processes() & started) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        pytest.fail(f"the prometheus package started a server that would not stop: {left}")


def prometheus_processes() -> set[int]:
    """Live processes running /usr/bin/prometheus."""
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry.name}/exe")
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if exe == str(PROMETHEUS) and state != "Z":
            found.add(int(entry.name))
    return found
