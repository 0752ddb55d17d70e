"""vLLM's defaults per release and GPU (``engine.releases``), as each release's
``arg_utils.py`` and ``config/`` set them."""

import pytest

from sweetspot.engine.releases import resolve_defaults, vllm_default
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.version import parse_vllm_version as v


@pytest.mark.parametrize("gpu, version, seqs, tokens", [
    ("a100-80gb", "0.33.0", 256, 2048),  # "a100" in the device name keeps the small tier
    ("a100-40gb", "0.33.0", 256, 2048),
    ("h100", "0.33.0", 1024, 8192),
    ("h200", "0.33.0", 1024, 8192),  # 139.8 GiB < 160 GiB
    ("b200", "0.33.0", 1024, 16384),  # >= 160 GiB tier, since 0.28
    ("b200", "0.27.0", 1024, 8192),
    ("l40s", "0.33.0", 256, 2048),
    ("cpu", "0.32.0", 128, 2048),
])
def test_batch_defaults_per_hardware(gpu, version, seqs, tokens):
    hw = load_hardware(gpu)
    assert vllm_default("max_num_seqs", v(version), hw) == seqs
    assert vllm_default("max_num_batched_tokens", v(version), hw) == tokens


def test_throughput_mode_doubles_unset_batch_defaults_from_0_17():
    hw = load_hardware("h100")
    mode = ServingConfig(performance_mode="throughput")
    assert vllm_default("max_num_seqs", v("0.33.0"), hw, mode) == 2048
    assert vllm_default("max_num_batched_tokens", v("0.33.0"), hw, mode) == 16384
    explicit = mode.replace(max_num_seqs=64)
    assert resolve_defaults(explicit, v("0.33.0"), hw).max_num_seqs == 64


def test_max_num_seqs_default_is_capped_by_the_token_budget():
    hw = load_hardware("h100")
    assert vllm_default("max_num_seqs", v("0.33.0"), hw,
                        ServingConfig(max_num_batched_tokens=512)) == 512


def test_memory_utilisation_default_changed_in_0_20():
    hw = load_hardware("a100")
    assert vllm_default("gpu_memory_utilization", v("0.19.1"), hw) == 0.9
    assert vllm_default("gpu_memory_utilization", v("0.20.0"), hw) == 0.92


def test_async_scheduling_default():
    gpu, cpu = load_hardware("h100"), load_hardware("cpu")
    assert vllm_default("async_scheduling", v("0.13.0"), gpu) is False
    assert vllm_default("async_scheduling", v("0.14.0"), gpu) is True
    assert vllm_default("async_scheduling", v("0.33.0"), cpu) is False
    ngram = ServingConfig(speculative=SpeculativeConfig("ngram", 4))
    assert vllm_default("async_scheduling", v("0.33.0"), gpu, ngram) is False
    eagle = ServingConfig(speculative=SpeculativeConfig("eagle3", 3, model="x"))
    assert vllm_default("async_scheduling", v("0.33.0"), gpu, eagle) is True


def test_other_defaults():
    hw = load_hardware("h100")
    resolved = resolve_defaults(ServingConfig(), v("0.33.0"), hw, model_max_len=32768)
    assert resolved.enable_prefix_caching is True
    assert resolved.scheduling_policy == "fcfs"
    assert resolved.block_size == 16
    assert resolved.max_model_len == 32768
    assert resolved.performance_mode == "balanced"
    assert vllm_default("performance_mode", v("0.16.0"), hw) is None
    assert vllm_default("block_size", v("0.32.0"), load_hardware("cpu")) == 128
    assert vllm_default("num_scheduler_steps", v("0.10.0"), hw) == 1
    assert vllm_default("num_scheduler_steps", v("0.10.1"), hw) is None


def test_v0_releases_defaults():
    """0.6/0.7 (V0): 256 sequences on every GPU, no prefix caching, whole prompts of
    max(max_model_len, 2048) tokens a step, chunked prefill (512 tokens a step) only over 32K."""
    hw = load_hardware("h100")
    short = resolve_defaults(ServingConfig(), v("0.6.3"), hw, model_max_len=8192)
    assert (short.max_num_seqs, short.enable_prefix_caching, short.enable_chunked_prefill,
            short.max_num_batched_tokens, short.gpu_memory_utilization,
            short.num_scheduler_steps) == (256, False, False, 8192, 0.9, 1)
    assert resolve_defaults(ServingConfig(max_model_len=1024), v("0.7.3"), hw,
                            model_max_len=8192).max_num_batched_tokens == 2048
    long = resolve_defaults(ServingConfig(), v("0.7.3"), hw, model_max_len=131072)
    assert (long.enable_chunked_prefill, long.max_num_batched_tokens) == (True, 512)
    assert resolve_defaults(ServingConfig(max_model_len=32768), v("0.7.3"), hw,
                            model_max_len=131072).enable_chunked_prefill is False
    # V1 from 0.8.0: the usage-context batch defaults and prefix caching on.
    v1 = resolve_defaults(ServingConfig(), v("0.8.0"), hw, model_max_len=8192)
    assert (v1.max_num_seqs, v1.enable_prefix_caching, v1.max_num_batched_tokens) == (
        1024, True, 8192)
