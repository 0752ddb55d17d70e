"""Debian's PostgreSQL server (``postgresql``) for the shared-storage tests: the fixture
``postgres_url`` starts a server of its own (``sweetspot.testing.postgres``) and stops it.

When the server binaries are missing the set-up installs the package with apt-get, as the
README says (root and network; ``apt-get update`` first when the lists are stale), and fails,
never skips, when it cannot. One install at a time (pytest-xdist workers share a lock file). The
package creates and starts a cluster of its own (``15 main``) where services may start: right
after installing, the set-up stops it and disables the service, so nothing is left running.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweetspot.testing.postgres import postgres_bin_dir, run_postgres
from tests.apt import apt_env, apt_install, run

LOCK = Path(tempfile.gettempdir()) / "sweetspot-apt-postgresql.lock"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    ensure_postgres()
    with run_postgres() as url:
        yield url


def ensure_postgres() -> None:
    if postgres_bin_dir() is not None:
        return
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it
        if postgres_bin_dir() is not None:
            return
        env = apt_env()
        done = apt_install("postgresql")
        for stop in (["systemctl", "disable", "--now", "postgresql"],
                     ["update-rc.d", "postgresql", "disable"],
                     ["/etc/init.d/postgresql", "stop"]):
            run(stop, env)
    if postgres_bin_dir() is None:
        pytest.fail("the shared-storage tests need Debian's postgresql package and "
                    f"`apt-get install -y postgresql` failed (exit {done.returncode}; it needs "
                    f"root and network):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
