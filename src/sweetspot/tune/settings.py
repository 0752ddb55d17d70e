"""A study's settings: everything that defines it, as plain JSON.

They are stored with the study, so ``--resume`` continues with exactly what the study started
with, whatever the command line says now. The server's secrets are masked where they are stored
and taken again from sweetspot's environment on resume; request headers are never stored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_args, redact_env, redact_url, restore_args, restore_env

__all__ = ["StudySettings"]


@dataclass(frozen=True)
class StudySettings:
    name: str
    model: str  # catalog name, HF id or folder (what `vllm serve` gets)
    gpu: str
    quant: str | None
    vllm_version: str
    workload: dict  # workload_to_dict form
    num_requests: int
    slos: dict[str, float]
    space: dict[str, list[str]]  # knob -> value labels, in order
    baseline: dict  # ServingConfig as JSON, explicit settings
    strategy: str = "auto"
    objective: str = "throughput"  # or "pareto"
    trials: int | None = 60
    seconds: float | None = None
    seed: int = 0
    confirm_repeats: int = 3
    memory_limit_gib: float | None = None
    backend: str = "sim"  # "sim", "vllm" or "endpoint" (vllm["url"]: a running server)
    vllm: dict = field(default_factory=dict)  # real backend: python, template, env, tokenizer...
    calibration: str | None = None
    rate: float | str | None = None  # offered req/s, "auto" (a share of the baseline's capacity)
    acceptance: float | None = None  # simulated speculative acceptance; None: per method
    fixed: dict[str, str] = field(default_factory=dict)  # knob -> value label: --fix, pinned
    # Sent with every request (--api-key, --header): used, never stored; given again on resume.
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        """What is stored (and reported): the server's secrets masked (``_secrets``); a resumed
        study takes them again from the environment (``with_secrets``)."""
        data = dataclasses.asdict(self)
        data.pop("headers", None)
        vllm = data.get("vllm") or {}
        if vllm.get("env"):
            vllm["env"] = redact_env(vllm["env"])
        if vllm.get("args"):
            vllm["args"] = redact_args(vllm["args"])
        if vllm.get("url"):
            vllm["url"] = redact_url(vllm["url"])
        return data

    def with_secrets(self) -> StudySettings:
        """Stored settings with their masked secrets taken from sweetspot's environment."""
        vllm = dict(self.vllm or {})
        if vllm.get("env"):
            vllm["env"] = restore_env(vllm["env"])
        if vllm.get("args"):
            vllm["args"] = restore_args(vllm["args"])
        return dataclasses.replace(self, vllm=vllm)

    @classmethod
    def from_dict(cls, data: dict) -> StudySettings:
        known = {f.name for f in dataclasses.fields(cls)} - {"headers"}
        if unknown := sorted(set(data) - known):
            raise SweetspotError(f"the stored study settings hold {', '.join(map(repr, unknown))}"
                                 ", which this sweetspot does not know (written by another "
                                 "version?)")
        return cls(**data)
