"""The roofline step-time model: pure arithmetic on the catalog, checked by hand."""

from __future__ import annotations

import pytest

from sweetspot.backends.sim.cost import ROOFLINE, LinearStepModel, RooflineModel, StepShape
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization

H100 = load_hardware("h100")
LLAMA = load_model("llama-3.1-8b").arch
BF16 = load_quantization("bf16")


def decode(batch: int, context: int = 0) -> StepShape:
    return StepShape(num_seqs=batch, num_decode_tokens=batch, num_prefill_tokens=0,
                     num_sampled=batch, decode_context=batch * context, prefill_context=0,
                     prefill_pairs=0.0)


def prefill(tokens: int) -> StepShape:
    return StepShape(num_seqs=1, num_decode_tokens=0, num_prefill_tokens=tokens, num_sampled=1,
                     decode_context=0, prefill_context=tokens,
                     prefill_pairs=tokens * (tokens + 1) / 2)


def test_single_decode_streams_the_weights_once() -> None:
    model = RooflineModel(H100, LLAMA, BF16)
    gpu, compute_bound = model.gpu_time(decode(1))
    weights = LLAMA.weight_bytes(BF16) / (H100.bandwidth_bytes_per_s * ROOFLINE.weight_bandwidth)
    assert not compute_bound
    assert gpu == pytest.approx(weights + LLAMA.num_layers * ROOFLINE.per_layer_s, rel=0.01)


def test_long_prefill_is_compute_bound_and_scales_with_tokens() -> None:
    model = RooflineModel(H100, LLAMA, BF16)
    t1, bound = model.gpu_time(prefill(4096))
    t2, _ = model.gpu_time(prefill(8192))
    assert bound
    assert 2.0 < t2 / t1 < 2.3  # linear layers double, causal attention quadruples


def test_kv_reads_grow_decode_time_with_context() -> None:
    model = RooflineModel(H100, LLAMA, BF16)
    short, _ = model.gpu_time(decode(32, 100))
    long_, _ = model.gpu_time(decode(32, 8000))
    extra = 32 * 7900 * LLAMA.kv_bytes_per_token() / (
        H100.bandwidth_bytes_per_s * ROOFLINE.kv_bandwidth)
    assert long_ - short == pytest.approx(extra, rel=0.15)


def test_tensor_parallelism_splits_work_and_adds_all_reduces() -> None:
    one = RooflineModel(H100, load_model("llama-3.1-70b").arch, BF16)
    four = RooflineModel(H100, load_model("llama-3.1-70b").arch, BF16, tensor_parallel_size=4)
    t1, _ = one.gpu_time(decode(8))
    t4, _ = four.gpu_time(decode(8))
    assert t1 / 4 < t4 < t1 / 2.5  # split four ways, plus 2 all-reduces per layer


def test_quantised_weights_read_fewer_bytes() -> None:
    awq = RooflineModel(H100, LLAMA, load_quantization("awq"))
    bf16 = RooflineModel(H100, LLAMA, BF16)
    assert awq.gpu_time(decode(1))[0] < 0.5 * bf16.gpu_time(decode(1))[0]
    # ...but dequantising makes big compute-bound steps slower than 16-bit.
    assert awq.gpu_time(prefill(8192))[0] > bf16.gpu_time(prefill(8192))[0]


def test_moe_reads_only_the_experts_its_tokens_touch() -> None:
    moe = RooflineModel(H100, load_model("qwen3-30b-a3b").arch, BF16)
    one, _ = moe.gpu_time(decode(1))
    many, _ = moe.gpu_time(decode(256))
    dense_bytes = load_model("qwen3-30b-a3b").arch.weight_bytes(BF16) / (
        H100.bandwidth_bytes_per_s * ROOFLINE.weight_bandwidth)
    assert one < 0.5 * dense_bytes  # top-8 of 128 experts per layer
    assert many > 0.9 * dense_bytes  # 256 tokens touch nearly every expert


def test_async_scheduling_hides_the_cpu_behind_the_gpu() -> None:
    model = RooflineModel(H100, LLAMA, BF16)
    shape = decode(64, 500)
    sync = model.step_time(shape, async_scheduling=False).duration_s
    overlapped = model.step_time(shape, async_scheduling=True).duration_s
    gpu, _ = model.gpu_time(shape)
    cpu = ROOFLINE.cpu_step_s + ROOFLINE.cpu_per_seq_s * 64
    assert sync == pytest.approx(gpu + cpu)
    assert overlapped == pytest.approx(max(gpu, cpu))


def test_linear_model_is_its_formula() -> None:
    model = LinearStepModel((0.002, 0.0001, 0.00001, 0.000002), 0.01)
    shape = prefill(1000)
    expected = 0.002 + 0.0001 * 1 + 0.00001 * 1000 + 0.000002 * shape.prefill_pairs / 1000
    assert model.step_time(shape, async_scheduling=False).duration_s == pytest.approx(expected)
