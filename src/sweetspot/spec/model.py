"""Model architectures: from the built-in catalog or a local Hugging Face ``config.json``.

Everything sizing needs is derived here from the shape alone: parameter counts (total and, for
mixture-of-experts models, active per token), weight bytes under a quantisation, KV-cache bytes
per token and FLOPs per token.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.spec.quant import Quantization, load_quantization

__all__ = [
    "KV_DTYPE_BYTES",
    "ModelArch",
    "ParamCounts",
    "ResolvedModel",
    "checkpoint_quantization",
    "kv_dtype_bytes",
    "load_model",
    "model_fingerprint",
    "model_names",
]

# Bytes per KV-cache element for vLLM's --kv-cache-dtype values ("auto" follows the model dtype).
KV_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}

_REQUIRED_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "vocab_size",
)


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts of one model; ``active`` is what one token touches."""

    total: int
    active: int
    embedding: int  # input embedding table
    lm_head: int  # 0 when tied to the embedding
    linear_total: int  # weights of every linear layer (attention + MLP/experts + router)
    linear_active: int  # linear weights one token multiplies with (top-k experts only)
    other: int  # norms and biases


@dataclass(frozen=True, slots=True)
class ModelArch:
    """The shape of a decoder-only transformer, as its config.json gives it."""

    name: str  # catalog id ("qwen2.5-14b") or the local folder's name
    hf_id: str  # Hugging Face repository id, or the local path
    architecture: str
    num_layers: int
    hidden_size: int
    intermediate_size: int  # dense MLP width
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    attention_bias: bool = False
    num_experts: int = 0  # 0 = dense
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    dtype: str = "bfloat16"  # torch_dtype of the checkpoint
    quantization: str | None = None  # set when config.json declares a quantisation_config
    aliases: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def param_counts(self) -> ParamCounts:
        h = self.hidden_size
        attention = h * self.q_size + 2 * h * self.kv_size + self.q_size * h
        biases = (self.q_size + 2 * self.kv_size) if self.attention_bias else 0
        if self.is_moe:
            expert = 3 * h * self.moe_intermediate_size  # gate, up, down
            router = h * self.num_experts
            mlp_total = self.num_experts * expert + router
            mlp_active = self.num_experts_per_tok * expert + router
        else:
            mlp_total = mlp_active = 3 * h * self.intermediate_size
        norms = 2 * h
        embedding = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        linear_total = self.num_layers * (attention + mlp_total)
        linear_active = self.num_layers * (attention + mlp_active)
        other = self.num_layers * (norms + biases) + h  # + final norm
        return ParamCounts(
            total=embedding + lm_head + linear_total + other,
            active=embedding + lm_head + linear_active + other,
            embedding=embedding,
            lm_head=lm_head,
            linear_total=linear_total,
            linear_active=linear_active,
            other=other,
        )

    def weight_bytes(self, quant: Quantization) -> int:
        """Bytes of weights on device: quantised linear layers, 16-bit everything else."""
        counts = self.param_counts()
        linear = counts.linear_total * quant.bits_per_weight / 8
        rest = (counts.embedding + counts.lm_head + counts.other) * 2
        return int(linear + rest)

    def kv_bytes_per_token(self, kv_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
        """KV-cache bytes one token occupies on one GPU: 2 (K, V) x layers x KV heads x head dim x
        element bytes. Under tensor parallelism the KV heads are split across GPUs (replicated
        when there are fewer KV heads than GPUs)."""
        heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel_size)
        element = kv_dtype_bytes(kv_dtype, self.dtype)
        return 2 * self.num_layers * heads_per_gpu * self.head_dim * element

    def flops_per_token(self, context_len: int = 0) -> float:
        """Forward FLOPs for one token attending to ``context_len`` earlier tokens: 2 per active
        linear weight (including the LM head) plus QK^T and AV over the context."""
        counts = self.param_counts()
        linear = 2 * (counts.linear_active + self.vocab_size * self.hidden_size)
        attention = 4 * self.num_layers * self.q_size * context_len
        return float(linear + attention)

    def default_quantization(self) -> Quantization:
        if self.quantization is not None:
            return load_quantization(self.quantization)
        return load_quantization("fp16" if self.dtype == "float16" else "bf16")


def kv_dtype_bytes(kv_dtype: str, model_dtype: str = "bfloat16") -> int:
    key = (model_dtype if kv_dtype == "auto" else kv_dtype).lower()
    if key not in KV_DTYPE_BYTES:
        raise SweetspotError(
            f"unknown KV-cache dtype {kv_dtype!r}; known: auto, {', '.join(KV_DTYPE_BYTES)}"
        )
    return KV_DTYPE_BYTES[key]


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A model reference turned into an architecture, plus the quantisation its name implies."""

    arch: ModelArch
    quantization: Quantization | None  # from a name like "...-AWQ" or the config.json


def _arch_from_config(name: str, hf_id: str, config: dict[str, Any],
                      aliases: Iterable[str] = ()) -> ModelArch:
    missing = [key for key in _REQUIRED_FIELDS if key not in config]
    if missing:
        raise SweetspotError(f"config.json for {name!r} is missing fields: {', '.join(missing)}")
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        experts = int(config.get("num_local_experts") or config.get("num_experts") or 0)
        quant = (config.get("quantization_config") or {}).get("quant_method")
        architecture = (config.get("architectures") or [config.get("architecture", "")])[0]
        # Qwen2 checkpoints carry q/k/v biases without saying so in config.json.
        qkv_bias = config.get("attention_bias", architecture.startswith("Qwen2"))
        return ModelArch(
            name=name,
            hf_id=hf_id,
            architecture=architecture,
            num_layers=int(config["num_hidden_layers"]),
            hidden_size=hidden,
            intermediate_size=int(config.get("intermediate_size", 4 * hidden)),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            vocab_size=int(config["vocab_size"]),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            max_position_embeddings=int(config.get("max_position_embeddings", 4096)),
            attention_bias=bool(qkv_bias),
            num_experts=experts,
            num_experts_per_tok=int(config.get("num_experts_per_tok", 0)) if experts else 0,
            moe_intermediate_size=int(
                config.get("moe_intermediate_size") or config.get("intermediate_size", 0)
            )
            if experts
            else 0,
            dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
            quantization=quant,
            aliases=tuple(aliases),
        )
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise SweetspotError(f"config.json for {name!r} has a malformed value: {exc}") from None


@cache
def _catalog() -> dict[str, ModelArch]:
    text = resources.files("sweetspot.spec").joinpath("data/models.toml").read_text()
    entries = tomllib.loads(text)["model"]
    return {
        name: _arch_from_config(name, entry["hf_id"], entry, entry.get("aliases", ()))
        for name, entry in entries.items()
    }


def model_names() -> list[str]:
    return sorted(_catalog())


# Suffixes of checkpoint names that say how the weights are stored, longest first.
_QUANT_SUFFIXES = (
    ("-gptq-int4", "gptq"),
    ("-gptq-int8", "int8"),
    ("-quantized.w8a8", "int8"),
    ("-w8a8", "int8"),
    ("-fp8-dynamic", "fp8"),
    ("-fp8", "fp8"),
    ("-awq", "awq"),
    ("-gptq", "gptq"),
)
_NAME_SUFFIXES = ("-instruct", "-chat", "-it", "-hf")


def _normalise(ref: str) -> str:
    return ref.strip().lower().rsplit("/", 1)[-1].replace("_", "-")


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for arch in _catalog().values():
        for key in (arch.name, arch.hf_id, *arch.aliases):
            index[_normalise(key)] = arch.name
    return index


def _lookup(ref: str) -> tuple[str | None, str | None]:
    """Catalog name and implied quantisation for a model id, trying suffix-stripped spellings."""
    key = _normalise(ref)
    quant = None
    for suffix, name in _QUANT_SUFFIXES:
        if key.endswith(suffix):
            key, quant = key[: -len(suffix)], name
            break
    candidates = [key]
    for suffix in _NAME_SUFFIXES:
        if key.endswith(suffix):
            candidates.append(key[: -len(suffix)])
    candidates.append(re.sub(r"^meta-", "", key))
    for candidate in candidates:
        if candidate in _index():
            return _index()[candidate], quant
    return None, quant


def _is_folder(ref: str) -> bool:
    return Path(ref).expanduser().is_dir() or ref.endswith("config.json")


def load_model(ref: str) -> ResolvedModel:
    """Resolve ``ref``: a local folder holding config.json, a catalog name or alias, or a
    Hugging Face id of a catalog model (quantised variants like ``...-AWQ`` included)."""
    path = Path(ref).expanduser()
    if _is_folder(ref):
        config_path = path if path.name == "config.json" else path / "config.json"
        if not config_path.is_file():
            raise SweetspotError(f"model folder {ref!r} has no config.json")
        try:
            config = json.loads(config_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SweetspotError(f"cannot read {config_path}: {exc}") from None
        if not isinstance(config, dict):
            raise SweetspotError(f"{config_path} does not hold a JSON object")
        arch = _arch_from_config(config_path.parent.name, str(config_path.parent), config)
        return ResolvedModel(arch, arch.default_quantization() if arch.quantization else None)
    name, quant = _lookup(ref)
    if name is None:
        raise SweetspotError(
            f"unknown model {ref!r}; give a folder with a config.json or one of: "
            + ", ".join(model_names())
        )
    return ResolvedModel(_catalog()[name], load_quantization(quant) if quant else None)


def checkpoint_quantization(ref: str, resolved: ResolvedModel,
                            requested: Quantization | None = None) -> Quantization:
    """The quantisation every command models and serves: ``requested`` (``--quant``) when
    given, else what the checkpoint is (its name's suffix or config.json, else its dtype).

    A catalog name or id stands for a family of checkpoints (``-AWQ``, ``-GPTQ-Int4``, ...), so
    any scheme goes. A local folder's weights are what they are: only a scheme vLLM applies at
    load time to 16-bit weights (``--quantization fp8``) may replace them.
    """
    own = resolved.quantization or resolved.arch.default_quantization()
    if requested is None or requested == own or not _is_folder(ref):
        return requested or own
    if requested.vllm_flag is None or own.weight_bits < 16:
        raise SweetspotError(
            f"--quant {requested.name}: {ref} holds {own.name} weights; vLLM quantises "
            "16-bit weights to fp8 at load time, other schemes need a checkpoint quantised "
            "offline (leave --quant out to serve the folder as it is)"
        )
    return requested


_SHAPE_FIELDS = ("num_layers", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
                 "head_dim", "vocab_size", "num_experts")


def model_fingerprint(arch: ModelArch) -> dict[str, int]:
    """What makes two models the same to a GPU: their shapes (not names, not weights)."""
    return {name: int(getattr(arch, name)) for name in _SHAPE_FIELDS}
