"""The accelerator catalog: what one GPU (or the CPU build's host) can hold and do."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sweetspot._errors import SweetspotError

GiB = 1024**3
GB = 1000**3

__all__ = ["GiB", "Hardware", "gpu_names", "load_hardware"]


@dataclass(frozen=True, slots=True)
class Hardware:
    """One accelerator, as the memory model and the cost models see it."""

    name: str  # canonical catalog id, e.g. "a100-80gb"
    display_name: str
    device_name: str  # what torch.cuda.get_device_name() prints; vLLM's defaults key on it
    aliases: tuple[str, ...]
    kind: str  # "gpu" or "cpu"
    memory_bytes: int  # marketing capacity
    usable_memory_bytes: int  # total memory as the CUDA runtime reports it
    bf16_flops: float  # dense peak, FLOP/s
    fp8_flops: float | None  # None where the hardware has no FP8 tensor cores
    int8_ops: float | None
    bandwidth_bytes_per_s: float
    interconnect: str
    interconnect_bytes_per_s: float  # per direction, per GPU
    compute_capability: str | None
    # Share of the bandwidth a decode step's weight streaming reaches with vLLM 0.24's
    # kernels, where measured (None: the H100's, 0.88); other releases' kernels reach the same
    # fraction of what they reach on the H100 (``backends/sim/cost.py``).
    weight_streaming: float | None = None

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"

    @property
    def supports_fp8(self) -> bool:
        """FP8 tensor cores (Ada, Hopper, Blackwell): FP8 KV cache and W8A8-FP8 need them."""
        return self.fp8_flops is not None


def _from_entry(name: str, entry: dict[str, Any]) -> Hardware:  # a parsed TOML table
    def tera(key: str) -> float | None:
        value = entry.get(key)
        return None if value is None else float(value) * 1e12

    return Hardware(
        name=name,
        display_name=entry["display_name"],
        device_name=entry["device_name"],
        aliases=tuple(entry.get("aliases", ())),
        kind=entry.get("kind", "gpu"),
        memory_bytes=int(entry["memory_gb"] * GB),
        usable_memory_bytes=int(entry["usable_memory_gib"] * GiB),
        bf16_flops=float(entry["bf16_tflops"]) * 1e12,
        fp8_flops=tera("fp8_tflops"),
        int8_ops=tera("int8_tops"),
        bandwidth_bytes_per_s=float(entry["bandwidth_gb_s"]) * GB,
        interconnect=entry["interconnect"],
        interconnect_bytes_per_s=float(entry["interconnect_gb_s"]) * GB,
        compute_capability=entry.get("compute_capability"),
        weight_streaming=entry.get("weight_streaming"),
    )


@cache
def _catalog() -> dict[str, Hardware]:
    text = resources.files("sweetspot.spec").joinpath("data/gpus.toml").read_text()
    entries = tomllib.loads(text)["gpu"]
    return {name: _from_entry(name, entry) for name, entry in entries.items()}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for hw in _catalog().values():
        for key in (hw.name, *hw.aliases, hw.device_name):
            index[_normalise(key)] = hw.name
    return index


def gpu_names() -> list[str]:
    """Canonical names of the built-in catalog, sorted."""
    return sorted(_catalog())


def load_hardware(name: str) -> Hardware:
    """Look a GPU up by catalog name, alias or torch device name (case-insensitive)."""
    key = _index().get(_normalise(name))
    if key is None:
        raise SweetspotError(f"unknown GPU {name!r}; known: {', '.join(gpu_names())}")
    return _catalog()[key]
