"""Checks vLLM makes on a configuration before it loads anything, with vLLM's own words.

Each problem may carry ``fix``: the ServingConfig changes that remove it, so ``lint`` can print a
corrected command and the tuner can skip a config that would only fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from sweetspot.engine.releases import (
    ASYNC_ANY_SPEC_SINCE,
    ASYNC_EAGLE_SPEC_SINCE,
    DRAFT_MODEL_SINCE,
    resolve_defaults,
)
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.knobs import (
    EAGLE_METHODS,
    KNOBS,
    SPECULATIVE_METHODS,
    ServingConfig,
    SpeculativeConfig,
)
from sweetspot.spec.model import ModelArch

__all__ = ["Problem", "validate_config"]

# Acceptance decays with depth: past this many tokens, each extra one is rarely accepted.
DEEP_SPECULATION_TOKENS = 5


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str  # "error" (vLLM refuses to start) or "warning" (starts, likely not as meant)
    flag: str | None
    message: str
    fix: dict[str, Any] = field(default_factory=dict)  # ServingConfig changes that mend it


def validate_config(
    config: ServingConfig,
    version: Version,
    hardware: Hardware | None = None,
    arch: ModelArch | None = None,
) -> list[Problem]:
    """Domain checks for every set knob, then vLLM's cross-setting checks."""
    problems = [
        Problem("error", KNOBS[name].flag, reason, {name: None})
        for name, value in config.explicit().items()
        if KNOBS[name].kind != "speculative" and (reason := KNOBS[name].check(value))
    ]
    if problems:  # cross-checks on out-of-domain values would only repeat them
        return problems
    if hardware is not None:
        model_len = arch.max_position_embeddings if arch else 8192
        resolved = resolve_defaults(config, version, hardware, model_len)
        problems += _scheduler_checks(config, resolved)
    if arch is not None:
        problems += _model_checks(config, arch)
    if config.speculative is not None:
        problems += _speculative_checks(config, version)
    if config.kv_cache_dtype and config.kv_cache_dtype.startswith("fp8") and hardware:
        if hardware.is_cpu:
            problems.append(Problem(
                "error", "--kv-cache-dtype",
                "the CPU backend supports only auto, bfloat16 and float16 KV caches",
                {"kv_cache_dtype": None},
            ))
        elif not hardware.supports_fp8:
            problems.append(Problem(
                "warning", "--kv-cache-dtype",
                f"{hardware.display_name} has no FP8 tensor cores: an fp8 KV cache halves its "
                "memory but is converted back on every read, and FlashAttention's fast path "
                "needs Hopper; measure it",
            ))
    return problems


def _scheduler_checks(config: ServingConfig, resolved: ServingConfig) -> list[Problem]:
    out = []
    tokens, seqs, max_len = (resolved.max_num_batched_tokens, resolved.max_num_seqs,
                             resolved.max_model_len)
    if not resolved.enable_chunked_prefill and tokens < max_len:
        out.append(Problem(
            "error", "--max-num-batched-tokens",
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_len}). This "
            "effectively limits the maximum sequence length to max_num_batched_tokens and makes "
            "vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
            "max_model_len.",
            {"max_num_batched_tokens": max_len},
        ))
    if tokens < seqs:
        out.append(Problem(
            "error", "--max-num-batched-tokens",
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs "
            f"({seqs}).",
            {"max_num_batched_tokens": seqs},
        ))
    threshold = resolved.long_prefill_token_threshold or 0
    if threshold > max_len:
        out.append(Problem(
            "error", "--long-prefill-token-threshold",
            f"long_prefill_token_threshold ({threshold}) cannot be greater than the "
            f"max_model_len ({max_len}).",
            {"long_prefill_token_threshold": None},
        ))
    return out


def _model_checks(config: ServingConfig, arch: ModelArch) -> list[Problem]:
    out = []
    derived = arch.max_position_embeddings
    if config.max_model_len is not None and config.max_model_len > derived:
        out.append(Problem(
            "error", "--max-model-len",
            f"User-specified max_model_len ({config.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} or model_max_length=None in "
            "model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            {"max_model_len": derived},
        ))
    tp = config.tensor_parallel_size or 1
    if arch.num_heads % tp:
        out.append(Problem(
            "error", "--tensor-parallel-size",
            f"Total number of attention heads ({arch.num_heads}) must be divisible by tensor "
            f"parallel size ({tp}).",
            {"tensor_parallel_size": None},
        ))
    return out


def _speculative_checks(config: ServingConfig, version: Version) -> list[Problem]:
    spec = config.speculative
    out = []
    if spec.method not in SPECULATIVE_METHODS:
        out.append(Problem(
            "error", "--speculative-config",
            f"unknown speculative method {spec.method!r}; vLLM knows "
            + ", ".join(SPECULATIVE_METHODS),
            {"speculative": None},
        ))
        return out
    if spec.num_speculative_tokens < 1:
        out.append(Problem("error", "--speculative-config",
                           "num_speculative_tokens must be at least 1", {"speculative": None}))
        return out
    if spec.method == "draft_model" and version < DRAFT_MODEL_SINCE:
        out.append(Problem(
            "error", "--speculative-config",
            f"draft-model speculation runs on the V1 engine only from vLLM {DRAFT_MODEL_SINCE}; "
            f"with {version} use method ngram (no draft model) or an EAGLE head",
            {"speculative": SpeculativeConfig("ngram", min(spec.num_speculative_tokens, 4),
                                              prompt_lookup_max=4, prompt_lookup_min=2)},
        ))
    if spec.method in ("draft_model", *EAGLE_METHODS) and not spec.model and spec.method != "mtp":
        out.append(Problem("error", "--speculative-config",
                           f"method {spec.method} needs a draft model ('model' key)",
                           {"speculative": None}))
    if spec.num_speculative_tokens > DEEP_SPECULATION_TOKENS:
        out.append(Problem(
            "warning", "--speculative-config",
            f"{spec.num_speculative_tokens} speculative tokens is deep: acceptance falls with "
            "each position, so the last tokens are rarely kept while every step still verifies "
            f"them; 3-{DEEP_SPECULATION_TOKENS} is the usual range. Measure the acceptance rate "
            "on your traffic (vllm:spec_decode_num_accepted_tokens).",
        ))
    if config.async_scheduling and version < ASYNC_ANY_SPEC_SINCE and (
            version < ASYNC_EAGLE_SPEC_SINCE or spec.method not in EAGLE_METHODS):
        out.append(Problem(
            "error", "--async-scheduling",
            "Currently, async scheduling is only supported with EAGLE/MTP kind of speculative "
            "decoding" if version >= ASYNC_EAGLE_SPEC_SINCE else
            "async scheduling does not support speculative decoding in this vLLM release",
            {"async_scheduling": None},
        ))
    if config.max_num_seqs and config.max_num_seqs > 64:
        out.append(Problem(
            "warning", "--speculative-config",
            f"speculation pays at small batches; at max-num-seqs {config.max_num_seqs} a busy "
            "server is compute-bound and verifying rejected tokens costs throughput",
        ))
    return out
