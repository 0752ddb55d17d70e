"""Peak memory of a server while it runs: host RSS of its process group, device memory by NVML.

A sampler thread reads, every ``interval_s``, the resident set of every process in the server's
process group (``/proc``; the sum counts pages shared between them more than once, so it bounds
the footprint from above) and, where nvidia-ml-py finds a driver, the device memory the group's
processes hold (``nvmlDeviceGetComputeRunningProcesses``) and the devices' total use. Without a
driver (the CPU build) the device figures stay ``None``.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import suppress

from sweetspot.backends.base import MemoryPeaks

__all__ = ["MemorySampler", "group_pids"]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def group_pids(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid`` (Linux ``/proc``)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command (which may hold spaces and parentheses): state ppid pgrp.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


class _Nvml:
    """nvidia-ml-py, or nothing where no NVIDIA driver answers."""

    def __init__(self) -> None:
        self.ok = False
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.nvml = pynvml
            self.ok = True
        except Exception:  # no package, no driver, no device: the CPU build
            self.ok = False

    def used_bytes(self) -> int | None:
        if not self.ok:
            return None
        return sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)

    def held_by(self, pids: set[int]) -> dict[int, int]:
        """Device memory per pid among ``pids``."""
        held: dict[int, int] = {}
        if not self.ok:
            return held
        for handle in self.handles:
            with suppress(Exception):
                for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid in pids and proc.usedGpuMemory is not None:
                        held[proc.pid] = held.get(proc.pid, 0) + proc.usedGpuMemory
        return held

    def close(self) -> None:
        if self.ok:
            with suppress(Exception):
                self.nvml.nvmlShutdown()


class MemorySampler:
    """Samples a process group's memory in a daemon thread between ``start`` and ``stop``.

    Also remembers every pid seen in the group, so teardown can wait for the device memory of
    processes that have already left the group's listing.
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.pids_seen: set[int] = set()
        self._pgid: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = _Nvml()
        self._baseline = self._nvml.used_bytes()
        self._rss = self._device = self._used = None
        self._samples = 0

    @property
    def pgid(self) -> int | None:
        return self._pgid

    def start(self, pgid: int) -> None:
        self._pgid = pgid
        self._thread = threading.Thread(target=self._loop, name="sweetspot-memory", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        if self._pgid is None:
            return
        pids = group_pids(self._pgid)
        self.pids_seen.update(pids)
        rss = sum(_rss_bytes(pid) for pid in pids)
        self._rss = max(self._rss or 0, rss) if pids else self._rss
        if self._nvml.ok:
            held = sum(self._nvml.held_by(self.pids_seen).values())
            self._device = max(self._device or 0, held)
            used = self._nvml.used_bytes()
            self._used = max(self._used or 0, used or 0)
        self._samples += 1

    def stop(self) -> MemoryPeaks:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        return MemoryPeaks(self._rss, self._device, self._used, self._baseline, self._samples)

    def close(self) -> None:
        self._nvml.close()

    def wait_device_free(self, timeout_s: float = 30.0) -> bool:
        """After the group is gone: True once none of its processes holds device memory."""
        if not self._nvml.ok:
            return True
        deadline_s = time.monotonic() + timeout_s
        while self._nvml.held_by(self.pids_seen):
            if time.monotonic() >= deadline_s:
                return False
            time.sleep(0.2)
        return True
