"""What changed when: every vLLM release fact sweetspot acts on, in one place that lint, advise,
the search space, the renderer, the memory model and the simulator read.

Each fact is the first release it holds for (``*_SINCE``) or the first it no longer does
(``*_REMOVED``), with where it was read; ``vllm_default`` and ``resolve_defaults`` are vLLM's
defaults per release and GPU, from ``vllm/engine/arg_utils.py`` (``get_batch_defaults``),
``vllm/config/cache.py`` and ``vllm/config/vllm.py`` of the published wheels, 0.10 to 0.33. Which
flags exist in which release is the flag table's (``engine/flags.py``, its data file).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from packaging.version import Version

from sweetspot.spec.hardware import GiB, Hardware
from sweetspot.spec.knobs import EAGLE_METHODS, ServingConfig, knob

__all__ = [
    "ASYNC_ANY_SPEC_SINCE",
    "ASYNC_EAGLE_SPEC_SINCE",
    "ASYNC_SCHEDULING_DEFAULT_SINCE",
    "CUDA_GRAPHS_PROFILED_SINCE",
    "DRAFT_MODEL_SINCE",
    "FAST_KERNELS_SINCE",
    "GPU_MEMORY_UTILIZATION_092_SINCE",
    "INTER_TOKEN_LATENCY_METRIC_SINCE",
    "KV_CACHE_USAGE_METRIC_SINCE",
    "KV_LOG_TOKENS_FIRST_SINCE",
    "LARGE_BATCH_DEFAULTS_SINCE",
    "NUM_SCHEDULER_STEPS_REMOVED",
    "PERFORMANCE_MODE_SINCE",
    "RESERVE_FULL_ISL_SINCE",
    "SPECULATIVE_CONFIG_SINCE",
    "V1_ENGINE_SINCE",
    "YAML_FALSE_SINCE",
    "YAML_NESTED_SINCE",
    "resolve_defaults",
    "v0_chunked_prefill",
    "vllm_default",
]

# The V1 engine is the default (V0 before; from 0.8 to 0.10 V0 still runs where V1 cannot, e.g.
# multi-step scheduling). V0's defaults: 256 sequences, no prefix caching, chunked prefill only
# for contexts over 32K with 512-token steps, whole prompts of max(max_model_len, 2048) tokens
# otherwise (vllm/engine/arg_utils.py and vllm/config.py of 0.6.x-0.7.x).
V1_ENGINE_SINCE = Version("0.8.0")
V0_LONG_CONTEXT = 32 * 1024
V0_CHUNKED_BATCHED_TOKENS = 512

# V0 multi-step scheduling (--num-scheduler-steps) is gone; async scheduling replaced it.
NUM_SCHEDULER_STEPS_REMOVED = Version("0.10.1")
# --speculative-config replaced --speculative-model and --num-speculative-tokens.
SPECULATIVE_CONFIG_SINCE = Version("0.8.3")
# Explicit --async-scheduling beside speculation: refused before 0.12, EAGLE/MTP only until 0.33
# (vllm/config/vllm.py of each release).
ASYNC_EAGLE_SPEC_SINCE = Version("0.12.0")
ASYNC_ANY_SPEC_SINCE = Version("0.33.0")
# Async scheduling is on by default (GPUs; not beside a non-EAGLE speculator before 0.33).
ASYNC_SCHEDULING_DEFAULT_SINCE = Version("0.14.0")
# The step model's kernel efficiencies (``backends/sim/cost.py``): releases from here reach the
# GEMM and bandwidth fractions measured on an H100 with 0.24 (GEMMs ~0.65 of the bf16 peak,
# weights streamed at ~0.8 of HBM bandwidth); older ones the fractions fitted to the public
# 0.5-0.11 runs (0.45 / 0.72). Bounded by measurements: 0.11 (public-cases P7) slow, 0.19.1
# (P8) and 0.24 (benchmarks/gpu/results-2026-12-07-issue22-h100) fast; placed with the engine
# core of async scheduling by default. Releases 0.12-0.19 are not measured.
FAST_KERNELS_SINCE = Version("0.14.0")
# Draft-model speculation came to the V1 engine (vllm-facts.md).
DRAFT_MODEL_SINCE = Version("0.15.0")
# vLLM's YAML loader turns nested mappings into JSON arguments, and writes "--no-<key>" for a
# false boolean (vllm/utils/argparse_utils.py).
YAML_NESTED_SINCE = Version("0.16.0")
YAML_FALSE_SINCE = Version("0.28.0")
# --performance-mode (balanced by default; throughput doubles the batch defaults).
PERFORMANCE_MODE_SINCE = Version("0.17.0")
# The scheduler admits a waiting request only when its whole input fits the free KV blocks, not
# just its first prefill chunk (SchedulerConfig.scheduler_reserve_full_isl, default True).
RESERVE_FULL_ISL_SINCE = Version("0.19.0")
# --gpu-memory-utilization defaults to 0.92 instead of 0.9.
GPU_MEMORY_UTILIZATION_092_SINCE = Version("0.20.0")
# The memory profile counts CUDA graphs' memory before sizing the KV cache.
CUDA_GRAPHS_PROFILED_SINCE = Version("0.21.0")
# Batch defaults of 16,384 tokens and 1,024 sequences on GPUs of 160 GiB or more.
LARGE_BATCH_DEFAULTS_SINCE = Version("0.28.0")
# The start-up log gives the KV cache in tokens first ("GPU KV cache size: N tokens, ...").
KV_LOG_TOKENS_FIRST_SINCE = Version("0.30.0")
# /metrics names (vllm/v1/metrics/loggers.py; vLLM hides a deprecated metric one minor release
# after deprecating it and removes it the next). vllm:gpu_cache_usage_perc became
# vllm:kv_cache_usage_perc in 0.9.2 (0.9.1 has only the old name; 0.12 only the new one).
KV_CACHE_USAGE_METRIC_SINCE = Version("0.9.2")
# vllm:time_per_output_token_seconds, which observed the gap between tokens, became
# vllm:inter_token_latency_seconds in 0.10.2, beside the new per-request TPOT histogram
# vllm:request_time_per_output_token_seconds (what `vllm bench serve` calls TPOT); the old name
# is hidden from 0.12 and gone in 0.13. Before 0.10.2 no histogram holds per-request TPOT.
INTER_TOKEN_LATENCY_METRIC_SINCE = Version("0.10.2")


def _batch_defaults(version: Version, hardware: Hardware, world_size: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks when neither is set
    (``EngineArgs.get_batch_defaults``, OPENAI_API_SERVER context)."""
    if hardware.is_cpu:
        return 2048 * world_size, 128 * world_size
    memory = hardware.usable_memory_bytes
    if version >= LARGE_BATCH_DEFAULTS_SINCE and memory >= 160 * GiB:
        return 16384, 1024
    if memory >= 70 * GiB and "a100" not in hardware.device_name.lower():
        return 8192, 1024
    return 2048, 256


def vllm_default(
    name: str,
    version: Version,
    hardware: Hardware,
    config: ServingConfig | None = None,
    model_max_len: int | None = None,
) -> Any:
    """The value vLLM ``version`` would use for knob ``name`` on ``hardware`` when the flag is
    left out, given the other settings in ``config`` (some defaults depend on them)."""
    config = config or ServingConfig()
    knob(name)  # validates the name
    if version < V1_ENGINE_SINCE and name in _V0_DEFAULTS:
        return _V0_DEFAULTS[name](config, model_max_len)
    tp = config.tensor_parallel_size or 1
    if name in ("max_num_batched_tokens", "max_num_seqs"):
        tokens, seqs = _batch_defaults(version, hardware, tp)
        throughput = (config.performance_mode == "throughput"
                      and version >= PERFORMANCE_MODE_SINCE)
        if throughput:
            tokens, seqs = tokens * 2, seqs * 2
        if name == "max_num_batched_tokens":
            if config.max_num_batched_tokens is not None:
                return config.max_num_batched_tokens
            if config.enable_chunked_prefill is False and model_max_len:
                tokens = max(tokens, model_max_len)
            return tokens
        budget = config.max_num_batched_tokens or vllm_default(
            "max_num_batched_tokens", version, hardware, config, model_max_len)
        return min(seqs, budget)
    if name == "gpu_memory_utilization":
        return 0.92 if version >= GPU_MEMORY_UTILIZATION_092_SINCE else 0.9
    if name == "async_scheduling":
        if hardware.is_cpu or version < ASYNC_SCHEDULING_DEFAULT_SINCE:
            return False
        spec = config.speculative
        return spec is None or spec.method in EAGLE_METHODS
    if name == "performance_mode":
        return "balanced" if version >= PERFORMANCE_MODE_SINCE else None
    if name == "block_size":
        return 128 if hardware.is_cpu else 16
    if name == "num_scheduler_steps":
        return 1 if version < NUM_SCHEDULER_STEPS_REMOVED else None
    return {
        "max_model_len": model_max_len,
        "enable_prefix_caching": True,
        "scheduling_policy": "fcfs",
        "speculative": None,
        "enable_chunked_prefill": True,
        "long_prefill_token_threshold": 0,
        "kv_cache_dtype": "auto",
        "tensor_parallel_size": 1,
        "kv_offloading_bytes": 0,
        "kv_cache_memory_bytes": None,
        "enforce_eager": False,
        "quantization": None,
    }[name]


def v0_chunked_prefill(config: ServingConfig, model_max_len: int | None) -> bool:
    """Whether a V0 engine chunks prefills: as set, else for contexts over 32K (single-step:
    multi-step runs took whole prompts)."""
    if config.enable_chunked_prefill is not None:
        return config.enable_chunked_prefill
    if (config.num_scheduler_steps or 1) > 1:
        return False
    max_len = config.max_model_len or model_max_len
    return max_len is not None and max_len > V0_LONG_CONTEXT


def _v0_batched_tokens(config: ServingConfig, model_max_len: int | None) -> int:
    if config.max_num_batched_tokens is not None:
        return config.max_num_batched_tokens
    if v0_chunked_prefill(config, model_max_len):
        return V0_CHUNKED_BATCHED_TOKENS
    return max(config.max_model_len or model_max_len or 0, 2048)


_V0_DEFAULTS: dict[str, Any] = {
    "max_num_seqs": lambda config, _: 256,
    "max_num_batched_tokens": _v0_batched_tokens,
    "enable_chunked_prefill": v0_chunked_prefill,
    "enable_prefix_caching": lambda config, _: False,
}


def resolve_defaults(
    config: ServingConfig,
    version: Version,
    hardware: Hardware,
    model_max_len: int | None = None,
) -> ServingConfig:
    """``config`` with every unset knob filled with vLLM's default."""
    filled = {
        f.name: vllm_default(f.name, version, hardware, config, model_max_len)
        for f in dataclasses.fields(config)
        if getattr(config, f.name) is None
    }
    return dataclasses.replace(config, **filled)
