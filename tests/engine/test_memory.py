import dataclasses
import re

import pytest

from sweetspot.engine.memory import estimate_memory, fit_finding
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version as v

A100 = load_hardware("a100-80gb")


def estimate(model="qwen2.5-7b", quant="bf16", hw=A100, version="0.33.0", draft=None, **knobs):
    arch = load_model(model).arch
    return estimate_memory(arch, load_quantization(quant), hw, ServingConfig(**knobs),
                           v(version), draft=load_model(draft).arch if draft else None)


def test_p6_kv_tokens_within_10_percent():
    """public-cases.md P6: Qwen2-7B-Instruct bf16, A100 80GB, vLLM 0.10.1.1, utilisation 0.25,
    max len 16384, chunked prefill 2048 tokens -> vLLM logged 93,872 KV tokens."""
    est = estimate("qwen2-7b", version="0.10.1.1", gpu_memory_utilization=0.25,
                   max_model_len=16384, max_num_batched_tokens=2048)
    assert est.ok
    assert est.kv_cache_tokens == pytest.approx(93_872, rel=0.10)
    assert est.kv_cache_tokens % 16 == 0
    assert est.max_concurrency == pytest.approx(est.kv_cache_tokens / 16384, rel=1e-9)


def test_kv_grows_with_utilisation_by_the_budget_difference():
    low = estimate(gpu_memory_utilization=0.8, max_model_len=8192)
    high = estimate(gpu_memory_utilization=0.9, max_model_len=8192)
    gained = (high.kv_cache_tokens - low.kv_cache_tokens) * high.kv_bytes_per_token
    assert gained == pytest.approx(0.1 * A100.usable_memory_bytes, rel=0.01)


def test_weights_that_do_not_fit():
    est = estimate("qwen2.5-72b", max_model_len=4096)
    assert est.failure.startswith("Failed to load model - not enough GPU memory")


def test_no_memory_for_cache_blocks():
    est = estimate("qwen2.5-32b", gpu_memory_utilization=0.5, max_model_len=4096)
    assert est.failure.startswith("No available memory for the cache blocks")


def test_max_model_len_beyond_kv_capacity_names_the_estimated_length():
    est = estimate(gpu_memory_utilization=0.2, max_model_len=32768)
    assert "To serve at least one request with the model's max seq len (32768)" in est.failure
    assert f"estimated maximum model length is {est.num_blocks * 16}." in est.failure
    assert est.kv_cache_tokens < 32768


def test_cuda_graphs_outside_the_budget_before_0_21():
    assert estimate(version="0.20.0", gpu_memory_utilization=0.99, max_model_len=8192).failure
    assert estimate(version="0.20.0", gpu_memory_utilization=0.95, max_model_len=8192).ok
    # Since 0.21 the graphs are counted at profiling: 0.99 starts, with less KV cache.
    assert estimate(version="0.21.0", gpu_memory_utilization=0.99, max_model_len=8192).ok
    assert estimate(version="0.20.0", gpu_memory_utilization=0.99, max_model_len=8192,
                    enforce_eager=True).ok


def test_utilisation_above_free_memory():
    est = estimate(gpu_memory_utilization=1.0, max_model_len=8192)
    assert est.failure.startswith("Free memory on device")


def test_tensor_parallel_splits_weights_and_kv_heads():
    one = estimate("qwen2.5-32b", max_model_len=8192)
    two = estimate("qwen2.5-32b", max_model_len=8192, tensor_parallel_size=2)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2, rel=1e-6)
    assert two.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert two.kv_cache_tokens > 2 * one.kv_cache_tokens


def test_fp8_kv_cache_doubles_tokens_and_awq_frees_memory():
    auto = estimate("qwen2.5-14b", max_model_len=8192)
    fp8 = estimate("qwen2.5-14b", max_model_len=8192, kv_cache_dtype="fp8")
    assert fp8.kv_cache_tokens == pytest.approx(2 * auto.kv_cache_tokens, rel=0.001)
    awq = estimate("qwen2.5-14b", "awq", max_model_len=8192)
    assert awq.kv_cache_tokens > auto.kv_cache_tokens * 1.3


def test_draft_model_takes_weights_and_kv():
    plain = estimate("qwen2.5-14b", max_model_len=8192)
    spec = estimate("qwen2.5-14b", max_model_len=8192, draft="qwen2.5-0.5b")
    assert spec.weight_bytes - plain.weight_bytes == pytest.approx(0.92 * GiB, rel=0.05)
    assert spec.kv_bytes_per_token == plain.kv_bytes_per_token + 12_288


def test_fixed_kv_size_and_cpu_kv_space():
    fixed = estimate(max_model_len=8192, kv_cache_memory_bytes=4 * GiB)
    assert fixed.kv_cache_tokens == 4 * GiB // (57_344 * 16) * 16
    cpu = estimate_memory(load_model("qwen2.5-0.5b").arch, load_quantization("bf16"),
                          load_hardware("cpu"), ServingConfig(max_model_len=4096), v("0.32.0"),
                          cpu_kvcache_space_bytes=2 * GiB)
    assert cpu.block_size == 128
    assert cpu.kv_cache_tokens == 2 * GiB // (12_288 * 128) * 128


def test_log_line_formats():
    est = estimate(max_model_len=8192)
    new = est.log_line(v("0.30.0"))
    assert new.startswith(f"GPU KV cache size: {est.kv_cache_tokens:,} tokens, Maximum "
                          "concurrency for 8,192 tokens per request: ")
    assert est.log_line(v("0.27.0")).count("\n") == 1


def _finding(model, gpu, quant="bf16", **knobs):
    return fit_finding(load_model(model).arch, load_quantization(quant), load_hardware(gpu),
                       ServingConfig(**{"max_model_len": 4096, **knobs}), v("0.33.0"))


def test_a_model_that_does_not_fit_names_the_smallest_tensor_parallel_size():
    """Llama-3.1-70B in bf16 is 131 GiB of weights: not one H100 (79 GiB), two do."""
    finding = _finding("llama-3.1-70b", "h100")
    assert finding.tensor_parallel_size == 2
    assert finding.message.startswith("llama-3.1-70b (bf16) does not fit on one NVIDIA H100")
    assert "weights need 131.42 GiB" in finding.message
    assert finding.message.endswith("--tensor-parallel-size 2 on 2 GPUs")
    assert _finding("llama-3.1-70b", "h100", tensor_parallel_size=2) is None
    assert _finding("llama-3.1-70b", "h100", "awq") is None  # 4-bit: one GPU
    assert _finding("llama-3.1-70b", "l4").tensor_parallel_size == 8


def test_no_suggestion_past_one_node_or_where_more_gpus_do_not_help():
    small = dataclasses.replace(load_hardware("l4"), usable_memory_bytes=5 * GiB)
    arch, bf16 = load_model("qwen2.5-7b").arch, load_quantization("bf16")
    config = ServingConfig(max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=1024,
                           gpu_memory_utilization=0.8)
    # 14.2 GiB of weights: 3.5 per GPU on 4 leave no KV room in 4 GiB; 8 GPUs would, but
    # vLLM cannot split 28 attention heads 8 ways.
    assert not estimate_memory(arch, bf16, small, config.replace(tensor_parallel_size=4),
                               v("0.33.0")).ok
    assert estimate_memory(arch, bf16, small, config.replace(tensor_parallel_size=8),
                           v("0.33.0")).ok
    finding = fit_finding(arch, bf16, small, config, v("0.33.0"))
    assert finding.tensor_parallel_size is None
    assert "not even --tensor-parallel-size 8 fits" in finding.message
    # A utilisation above what is free at start-up is not a matter of GPUs.
    too_high = _finding("llama-3.1-8b", "h100", gpu_memory_utilization=0.999)
    assert too_high is not None and too_high.tensor_parallel_size is None
    assert "Free memory on device" in too_high.message and "tensor" not in too_high.message


def test_a_shorter_max_model_len_on_fewer_gpus_is_named_too():
    """Llama-3.1-8B at its full 131,072 tokens needs 16 GiB of KV for one request: more than
    one A10 has left after the weights, so two GPUs, or one with vLLM's estimated length."""
    finding = _finding("llama-3.1-8b", "a10", max_model_len=131_072)
    assert finding.tensor_parallel_size == 2
    assert "max seq len (131072)" in finding.message
    shorter = re.search(r"or on one GPU with --max-model-len (\d+) or less", finding.message)
    assert shorter, finding.message
    assert _finding("llama-3.1-8b", "a10", max_model_len=int(shorter[1])) is None
