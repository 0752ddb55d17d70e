"""Weight quantisation schemes: how many bytes a weight takes and which math runs on it."""

from __future__ import annotations

from dataclasses import dataclass

from sweetspot._errors import SweetspotError

__all__ = ["QUANTIZATIONS", "Quantization", "load_quantization"]


@dataclass(frozen=True, slots=True)
class Quantization:
    """How the linear layers' weights are stored and computed.

    Embeddings, the LM head and norms stay in the activation dtype under every scheme here
    (vLLM quantises only the linear layers of AWQ/GPTQ/FP8/INT8 checkpoints).
    """

    name: str  # "bf16", "fp16", "fp8", "int8", "awq", "gptq"
    weight_bits: int  # bits per linear-layer weight, before group metadata
    group_size: int | None  # weights sharing one scale (+ zero point); None = per channel
    zero_point_bits: int  # bits of zero point per group (asymmetric schemes), 0 if symmetric
    compute: str  # math of the matmuls: "bf16", "fp16", "fp8" or "int8"
    activation_dtype: str  # dtype of activations and of an "auto" KV cache: "bfloat16" or "float16"
    vllm_flag: str | None  # value for --quantization when vLLM must be told; None = auto-detected
    checkpoint_suffix: str  # appended to a base model id to name the quantised checkpoint
    description: str

    @property
    def bits_per_weight(self) -> float:
        """Storage bits per weight including group scales (fp16) and zero points."""
        if self.group_size is None:
            return float(self.weight_bits)
        return self.weight_bits + (16 + self.zero_point_bits) / self.group_size

    @property
    def is_weight_only(self) -> bool:
        """Weights are de-quantised to 16-bit before the matmul (W4A16)."""
        return self.compute in ("bf16", "fp16") and self.weight_bits < 16


QUANTIZATIONS: dict[str, Quantization] = {
    q.name: q
    for q in (
        Quantization("bf16", 16, None, 0, "bf16", "bfloat16", None, "", "bfloat16 weights"),
        Quantization("fp16", 16, None, 0, "fp16", "float16", None, "", "float16 weights"),
        Quantization(
            "fp8", 8, None, 0, "fp8", "bfloat16", "fp8", "",
            "FP8 W8A8 (online dynamic quantisation of a 16-bit checkpoint; FP8 tensor cores)",
        ),
        Quantization(
            "int8", 8, None, 0, "int8", "bfloat16", None, "-quantized.w8a8",
            "INT8 W8A8 (compressed-tensors checkpoint; INT8 tensor cores)",
        ),
        Quantization(
            "awq", 4, 128, 4, "fp16", "float16", None, "-AWQ",
            "AWQ int4 weights, group 128, fp16 activations (Marlin kernels)",
        ),
        Quantization(
            "gptq", 4, 128, 4, "fp16", "float16", None, "-GPTQ-Int4",
            "GPTQ int4 weights, group 128, fp16 activations (Marlin kernels)",
        ),
    )
}

_ALIASES = {
    "bfloat16": "bf16",
    "none": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "w8a8-fp8": "fp8",
    "fp8-dynamic": "fp8",
    "w8a8": "int8",
    "w8a8-int8": "int8",
    "int4": "awq",
    "awq-int4": "awq",
    "awq_marlin": "awq",
    "gptq-int4": "gptq",
    "gptq_marlin": "gptq",
}


def load_quantization(name: str) -> Quantization:
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, _ALIASES.get(key.replace("-", "_"), key))
    if key not in QUANTIZATIONS:
        raise SweetspotError(
            f"unknown quantisation {name!r}; known: {', '.join(QUANTIZATIONS)}"
        )
    return QUANTIZATIONS[key]
