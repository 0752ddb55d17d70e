import pytest

from sweetspot import SweetspotError
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import (
    KNOBS,
    ServingConfig,
    SpeculativeConfig,
    knob,
    resolve_defaults,
    vllm_default,
)
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


def test_domains():
    assert KNOBS["gpu_memory_utilization"].check(1.2)
    assert KNOBS["gpu_memory_utilization"].check(0) and not KNOBS["gpu_memory_utilization"].check(1)
    assert KNOBS["max_num_seqs"].check(0)
    assert KNOBS["scheduling_policy"].check("lof")
    assert KNOBS["scheduling_policy"].check("priority") is None
    assert all(k.restart for k in KNOBS.values())
    guide = {k.name for k in KNOBS.values() if k.guide}
    assert guide == {"max_num_seqs", "max_model_len", "gpu_memory_utilization",
                     "enable_prefix_caching", "scheduling_policy", "num_scheduler_steps",
                     "speculative"}


def test_knob_lookup_by_any_spelling():
    assert knob("--max-num-seqs") is knob("max_num_seqs") is knob("max-num-seqs")
    with pytest.raises(SweetspotError, match="unknown knob"):
        knob("--num-gpus")
    with pytest.raises(SweetspotError, match="unknown knob"):
        ServingConfig().replace(max_seqs=3)


def test_speculative_config_json_round_trip():
    spec = SpeculativeConfig("draft_model", 4, model="Qwen/Qwen2.5-0.5B-Instruct")
    assert spec.to_json() == ('{"method":"draft_model","model":"Qwen/Qwen2.5-0.5B-Instruct",'
                              '"num_speculative_tokens":4}')
    assert SpeculativeConfig.from_dict(spec.to_dict()) == spec
    with pytest.raises(SweetspotError, match="num_speculative_tokens"):
        SpeculativeConfig.from_dict({"method": "ngram"})


def test_versions():
    assert v("v0.10.1.1") < v("0.11.0") < v("0.33.0+cu128") == v("0.33.0")
    with pytest.raises(SweetspotError, match="not a vLLM version"):
        v("latest")
    with pytest.raises(SweetspotError, match="older than"):
        v("0.5.4")
