"""A Ray cluster on this machine for tests and demos: a head node and worker nodes, each a
``ray start`` with its own CPUs and resources, all under one temporary folder of their own.

``ray stop`` would stop every Ray process on the machine (another test's cluster too), so a
cluster here is stopped by its folder: every process whose command line names it is killed
(SIGTERM, then SIGKILL after a grace) and none is left. ``kill_node`` SIGKILLs one worker
node's processes mid-run, as a lost machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.server import free_port

__all__ = ["RayCluster", "local_ray_cluster"]

_STOP_GRACE_S = 10.0


@dataclass
class RayCluster:
    address: str  # "127.0.0.1:PORT": what ``ray.init(address=...)`` and --ray-address take
    temp_dir: Path  # every node's processes name it
    node_dirs: list[Path] = field(default_factory=list)  # per node, its own plasma/log root

    def processes(self, node: int | None = None) -> list[int]:
        """Live processes of the cluster (of one node: 0 is the head): those whose command
        line names its folder, and their descendants (the raylet's workers, which Ray renames
        ``ray::...``)."""
        marks = [str(self.temp_dir)] if node is None else [str(self.node_dirs[node])]
        parents: dict[int, int] = {}
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError, UnicodeDecodeError):
                continue
            if fields[0] == "Z":
                continue
            parents[int(entry.name)] = int(fields[1])
            if any(m in cmdline for m in marks):
                found.add(int(entry.name))
        grew = True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in found} - found
            found |= more
            grew = bool(more)
        return sorted(found)

    def busy(self, node: int, task: str) -> bool:
        """A worker process of ``node`` runs a task of function ``task`` now (Ray names the
        process after it: ``ray::NAME``)."""
        for pid in self.processes(node):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{task}".encode()):
                    return True
        return False

    def kill_node(self, node: int) -> None:
        """SIGKILL a worker node's processes: its machine is gone."""
        assert node > 0, "the head is the cluster"
        _signal_all(self.processes(node), signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM to every process of the cluster, SIGKILL to those left after the grace.
        The processes are those found before the first signal: a worker whose raylet exits
        first is no longer the raylet's child, and must not be lost."""
        for _ in range(3):  # what started while stopping is stopped too
            pids = self.processes()
            if not pids:
                return
            _signal_all(pids, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_GRACE_S
            while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
                time.sleep(0.2)
            _signal_all(left, signal.SIGKILL)
            deadline = time.monotonic() + _STOP_GRACE_S
            while [p for p in pids if _alive(p)] and time.monotonic() < deadline:
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _ray() -> str:
    found = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    if not Path(found).exists():
        raise SweetspotError("no `ray` command: pip install 'vllm-sweetspot[ray]'")
    return found


@contextlib.contextmanager
def local_ray_cluster(nodes: Sequence[Mapping[str, object]],
                      start_timeout_s: float = 120.0) -> Iterator[RayCluster]:
    """Nodes on this machine, each ``{"num_cpus": N, "resources": {...}}`` (the first is the
    head); stopped on the way out, whatever happens. Each node's sockets and logs are under
    its own folder (short: a Unix socket path is at most 107 bytes)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="sst-ray-", dir="/tmp"))
    port = free_port()
    cluster = RayCluster(f"127.0.0.1:{port}", temp_dir)
    # No token authentication: the nodes and the drivers are this machine's processes on
    # 127.0.0.1, and a token written to ~/.ray by one cluster's head would not be another's.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_AUTH_MODE": "disabled"}
    try:
        for i, node in enumerate(nodes):
            node_dir = temp_dir / f"n{i}"
            node_dir.mkdir()
            cluster.node_dirs.append(node_dir)
            argv = [_ray(), "start", f"--temp-dir={node_dir}", "--disable-usage-stats",
                    f"--num-cpus={node.get('num_cpus', 1)}", "--num-gpus=0",
                    f"--resources={json.dumps(node.get('resources', {}))}"]
            argv += (["--head", f"--port={port}", "--include-dashboard=false",
                      "--node-ip-address=127.0.0.1"] if i == 0
                     else [f"--address={cluster.address}", "--node-ip-address=127.0.0.1"])
            done = subprocess.run(argv, capture_output=True, text=True, env=env,
                                  timeout=start_timeout_s, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise SweetspotError(f"ray start (node {i}) failed: {' | '.join(tail)}")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
