"""A PostgreSQL server for tests and demos: Debian's server binaries (``postgresql``), a new
cluster in a temporary folder, on a free port of 127.0.0.1, trusting local connections.

PostgreSQL refuses to run as root; when this process is root, ``initdb`` and the server run as
the ``postgres`` user the package created, in a folder it owns. Lifecycle as the other
launchers: ``run_postgres`` yields the database URL once the server answers, and on the way
out (normal, an exception, Ctrl-C) stops it (``pg_ctl stop -m fast``, then SIGKILL of its
process group) and removes the folder: nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.server import free_port

__all__ = ["postgres_bin_dir", "run_postgres"]

_READY_TIMEOUT_S = 60.0


def postgres_bin_dir() -> Path | None:
    """The newest installed server's binaries (Debian: /usr/lib/postgresql/N/bin)."""
    root = Path("/usr/lib/postgresql")
    found = sorted((p / "bin" for p in root.iterdir() if (p / "bin" / "pg_ctl").exists()),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0) \
        if root.exists() else []
    return found[-1] if found else None


def _as_user() -> tuple[list[str], int | None, int | None]:
    """(command prefix, uid, gid) that runs the server: ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise SweetspotError("PostgreSQL will not run as root and there is no postgres user "
                             "(apt-get install postgresql creates it)") from None
    return ["runuser", "-u", "postgres", "--"], user.pw_uid, user.pw_gid


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def run_postgres(bin_dir: Path | None = None, database: str = "sweetspot") -> Iterator[str]:
    """A running server's URL for SQLAlchemy with psycopg 3
    (``postgresql+psycopg://postgres@127.0.0.1:PORT/DATABASE``)."""
    bin_dir = bin_dir or postgres_bin_dir()
    if bin_dir is None:
        raise SweetspotError("no PostgreSQL server binaries (apt-get install postgresql)")
    prefix, uid, gid = _as_user()
    folder = Path(tempfile.mkdtemp(prefix="sst-pg-"))
    data, sockets = folder / "data", folder / "run"
    sockets.mkdir()
    if uid is not None and gid is not None:
        folder.chmod(0o755)
        for path in (folder, sockets):
            os.chown(path, uid, gid)
    port = free_port()
    server: subprocess.Popen | None = None
    try:
        done = _run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                     "--auth=trust", "--no-sync", "-E", "UTF8"])
        if done.returncode != 0:
            raise SweetspotError(f"initdb failed: {done.stderr.strip()[-300:]}")
        server = subprocess.Popen(
            [*prefix, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sockets}",
             "-c", "fsync=off", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"),  # noqa: SIM115
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while _run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
                   ).returncode != 0:
            if server.poll() is not None or time.monotonic() > deadline:
                log = (folder / "server.log").read_text()[-500:]
                raise SweetspotError(f"PostgreSQL did not start: {log}")
            time.sleep(0.2)
        done = _run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U",
                     "postgres", database])
        if done.returncode != 0:
            raise SweetspotError(f"createdb failed: {done.stderr.strip()[-300:]}")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(server: subprocess.Popen) -> None:
    """SIGINT is PostgreSQL's fast shutdown; its whole group is killed if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
