"""The tunable settings of ``vllm serve``: a typed ``ServingConfig`` and one ``Knob`` per field.

A ``ServingConfig`` field left at ``None`` means "whatever vLLM picks": the defaults depend on the
vLLM release and on the hardware, so ``engine.releases`` (``vllm_default``,
``resolve_defaults``) fills them as each release does.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.spec.hardware import GiB

__all__ = [
    "KNOBS",
    "SPECULATIVE_METHODS",
    "Knob",
    "ServingConfig",
    "SpeculativeConfig",
    "knob",
    "parse_settings",
]

# Methods of --speculative-config that need no separate draft checkpoint.
SELF_DRAFTING_METHODS = ("ngram", "ngram_gpu", "suffix")
# EAGLE-style drafters run inside the model runner; async scheduling stays on with them.
EAGLE_METHODS = ("eagle", "eagle3", "mtp")
SPECULATIVE_METHODS = (*SELF_DRAFTING_METHODS, "draft_model", *EAGLE_METHODS, "medusa",
                       "mlp_speculator")


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """What ``--speculative-config`` carries."""

    method: str  # one of SPECULATIVE_METHODS
    num_speculative_tokens: int  # tokens proposed per step (k)
    model: str | None = None  # draft checkpoint (draft_model, eagle*)
    prompt_lookup_min: int | None = None  # ngram window bounds
    prompt_lookup_max: int | None = None
    draft_tensor_parallel_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if self.model is not None:
            out["model"] = self.model
        out["num_speculative_tokens"] = self.num_speculative_tokens
        for name in ("prompt_lookup_min", "prompt_lookup_max", "draft_tensor_parallel_size"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeculativeConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SweetspotError(f"unknown speculative-config keys: {', '.join(unknown)}")
        try:
            method = str(data.get("method") or ("draft_model" if data.get("model") else ""))
            if not method:
                raise SweetspotError("speculative-config needs a method (or a draft model)")
            if "num_speculative_tokens" not in data:
                raise SweetspotError("speculative-config needs num_speculative_tokens")
            return cls(
                method=method,
                num_speculative_tokens=int(data["num_speculative_tokens"]),
                model=data.get("model"),
                prompt_lookup_min=_opt_int(data.get("prompt_lookup_min")),
                prompt_lookup_max=_opt_int(data.get("prompt_lookup_max")),
                draft_tensor_parallel_size=_opt_int(data.get("draft_tensor_parallel_size")),
            )
        except (TypeError, ValueError) as exc:
            raise SweetspotError(f"malformed speculative-config: {exc}") from None


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """One launch configuration of ``vllm serve``. ``None`` = vLLM's default for the release and
    hardware (see ``resolve_defaults``). Units: tokens, bytes, fractions."""

    # The guide's seven settings (num_scheduler_steps exists only before 0.10.1).
    max_num_seqs: int | None = None  # requests in one batch
    max_model_len: int | None = None  # prompt + output tokens of one request
    gpu_memory_utilization: float | None = None  # fraction of device memory vLLM may use
    enable_prefix_caching: bool | None = None
    scheduling_policy: str | None = None  # "fcfs" or "priority"
    num_scheduler_steps: int | None = None  # V0 multi-step decoding (legacy)
    speculative: SpeculativeConfig | None = None
    # What a tuner needs beside them.
    max_num_batched_tokens: int | None = None  # token budget of one step
    enable_chunked_prefill: bool | None = None
    long_prefill_token_threshold: int | None = None
    kv_cache_dtype: str | None = None  # "auto", "fp8", "fp8_e4m3", "fp8_e5m2", ...
    tensor_parallel_size: int | None = None
    async_scheduling: bool | None = None
    performance_mode: str | None = None  # "balanced", "interactivity", "throughput"
    block_size: int | None = None  # tokens per KV block
    kv_offloading_bytes: int | None = None  # CPU KV offload space (--kv-offloading-size, GiB)
    kv_cache_memory_bytes: int | None = None  # fixed KV size; overrides the utilisation
    enforce_eager: bool | None = None  # no CUDA graphs
    quantization: str | None = None  # --quantization; None = what the checkpoint declares

    def replace(self, **changes: Any) -> ServingConfig:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise SweetspotError(f"unknown knob(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def explicit(self) -> dict[str, Any]:
        """The settings given explicitly, in field order."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


@dataclass(frozen=True, slots=True)
class Knob:
    """One tunable setting: its flag, its domain and how a search should sample it."""

    name: str  # ServingConfig field
    flag: str  # long vLLM flag
    kind: str  # "int", "float", "bool", "choice", "str", "bytes" or "speculative"
    doc: str
    minimum: float | None = None  # inclusive bounds for numbers
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[Any, ...] = ()  # allowed values of a choice knob
    sweep: tuple[Any, ...] = ()  # values the default search space sweeps (tune.space)
    guide: bool = False  # one of the seven settings of the field guide
    restart: bool = True  # every engine argument of vLLM is fixed for the server's lifetime
    notes: tuple[str, ...] = field(default=())

    def check(self, value: Any) -> str | None:
        """Why ``value`` is outside the domain, or None when it is inside."""
        if value is None:
            return None
        if self.kind == "choice":
            return None if value in self.choices else (
                f"{self.flag} must be one of {', '.join(map(str, self.choices))}, not {value!r}"
            )
        if self.kind in ("int", "float", "bytes"):
            if self.minimum is not None and (
                value <= self.minimum if self.exclusive_minimum else value < self.minimum
            ):
                op = ">" if self.exclusive_minimum else ">="
                return f"{self.flag} must be {op} {self.minimum:g}, not {value:g}"
            if self.maximum is not None and value > self.maximum:
                return f"{self.flag} must be <= {self.maximum:g}, not {value:g}"
        return None


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("max_num_seqs", "--max-num-seqs", "int",
             "Most requests scheduled in one step (the batch's concurrency ceiling).",
             minimum=1, maximum=65536, sweep=(16, 32, 64, 128, 256, 512, 1024), guide=True),
        Knob("max_model_len", "--max-model-len", "int",
             "Longest prompt + output one request may have. In V1 it reserves no KV memory per "
             "sequence; it must fit once in the KV cache.",
             minimum=1, sweep=(2048, 4096, 8192, 16384, 32768), guide=True),
        Knob("gpu_memory_utilization", "--gpu-memory-utilization", "float",
             "Fraction of device memory vLLM may use for weights, activations and KV cache.",
             minimum=0, maximum=1, exclusive_minimum=True,
             sweep=(0.85, 0.9, 0.92, 0.95), guide=True),
        Knob("enable_prefix_caching", "--enable-prefix-caching", "bool",
             "Reuse the KV blocks of identical prompt prefixes.", sweep=(False, True), guide=True),
        Knob("scheduling_policy", "--scheduling-policy", "choice",
             "Order of admission: first come first served, or per-request priority "
             "(lower value first; may preempt lower-priority running requests).",
             choices=("fcfs", "priority"), sweep=("fcfs", "priority"), guide=True),
        Knob("num_scheduler_steps", "--num-scheduler-steps", "int",
             "V0 multi-step scheduling (removed in 0.10.1; async scheduling replaced it).",
             minimum=1, maximum=64, sweep=(1, 4, 8, 16), guide=True),
        Knob("speculative", "--speculative-config", "speculative",
             "Speculative decoding: a drafter proposes k tokens, the model verifies them in one "
             "step.", guide=True),
        Knob("max_num_batched_tokens", "--max-num-batched-tokens", "int",
             "Token budget of one step (prefill chunks + decodes).",
             minimum=1, sweep=(2048, 4096, 8192, 16384)),
        Knob("enable_chunked_prefill", "--enable-chunked-prefill", "bool",
             "Split long prompts over several steps so decodes keep running.",
             sweep=(True, False)),
        Knob("long_prefill_token_threshold", "--long-prefill-token-threshold", "int",
             "Prompts longer than this are prefilled in chunks of at most this size.",
             minimum=0, sweep=(0, 256, 512, 1024, 2048)),
        Knob("kv_cache_dtype", "--kv-cache-dtype", "choice",
             "Element type of the KV cache; fp8 halves its bytes per token.",
             choices=("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"),
             sweep=("auto", "fp8")),
        Knob("tensor_parallel_size", "--tensor-parallel-size", "int",
             "GPUs one model is split across.", minimum=1, maximum=64, sweep=(1, 2, 4, 8)),
        Knob("async_scheduling", "--async-scheduling", "bool",
             "Overlap the CPU's scheduling of step n+1 with the GPU's step n.",
             sweep=(False, True)),
        Knob("performance_mode", "--performance-mode", "choice",
             "Preset of batch defaults: throughput doubles the unset batch limits.",
             choices=("balanced", "interactivity", "throughput"),
             sweep=("balanced", "interactivity", "throughput")),
        Knob("block_size", "--block-size", "int", "Tokens per KV-cache block.",
             minimum=1, maximum=512, sweep=(16, 32, 64, 128)),
        Knob("kv_offloading_bytes", "--kv-offloading-size", "bytes",
             "Host memory for KV blocks evicted from the device (flag in GiB).",
             minimum=0, sweep=(0, 16 * GiB, 64 * GiB)),
        Knob("kv_cache_memory_bytes", "--kv-cache-memory-bytes", "bytes",
             "Exact KV-cache size per GPU; gpu-memory-utilization is then ignored.", minimum=1),
        Knob("enforce_eager", "--enforce-eager", "bool",
             "Run without CUDA graphs / torch.compile: faster start, slower decode.",
             sweep=(False, True)),
        Knob("quantization", "--quantization", "str",
             "Weight quantisation method; fp8 quantises a 16-bit checkpoint at load time."),
    )
}


def knob(name: str) -> Knob:
    """A knob by field name or flag spelling (``max_num_seqs``, ``--max-num-seqs``)."""
    key = name.strip().lstrip("-").replace("-", "_")
    if key in KNOBS:
        return KNOBS[key]
    for candidate in KNOBS.values():
        if candidate.flag.lstrip("-").replace("-", "_") == key:
            return candidate
    raise SweetspotError(f"unknown knob {name!r}; known: {', '.join(KNOBS)}")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse_value(k: Knob, raw: str) -> Any:
    text = raw.strip()
    if text.lower() in ("default", "none", "auto") and k.kind not in ("choice", "str"):
        return None
    try:
        if k.kind == "int":
            return int(text)
        if k.kind == "float":
            return float(text)
        if k.kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError("expected true or false")
        if k.kind == "bytes":
            units = {"k": 1024, "m": 1024**2, "g": GiB, "t": 1024**4}
            number = text.lower().removesuffix("ib").removesuffix("b")
            scale = units.get(number[-1:], 1)
            return int(float(number[:-1] if scale != 1 else number) * scale)
        if k.kind == "speculative":
            return SpeculativeConfig.from_dict(json.loads(text))
    except (ValueError, json.JSONDecodeError) as exc:
        raise SweetspotError(f"bad value {raw!r} for {k.name}: {exc}") from None
    return text


def parse_settings(items: list[str] | tuple[str, ...], base: ServingConfig | None = None
                   ) -> ServingConfig:
    """``["max_num_seqs=64", "enable-prefix-caching=false", ...]`` onto ``base``; each value
    checked against its knob's domain. ``knob=default`` unsets it."""
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise SweetspotError(f"bad setting {item!r}: expected knob=value")
        k = knob(name)
        value = _parse_value(k, raw)
        if (reason := k.check(value)) is not None:
            raise SweetspotError(reason)
        changes[k.name] = value
    return (base or ServingConfig()).replace(**changes)
