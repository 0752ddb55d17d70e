"""The search space: pinning knobs with --fix (parse, then resolve against the default space)."""

from __future__ import annotations

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.resolve import fixed_values, resolve_space_and_baseline
from sweetspot.tune.space import parse_fix_items, storage_label

WORKLOAD = validate_workload({"name": "w", "prompt": {"kind": "fixed", "value": 100},
                              "output": {"kind": "fixed", "value": 50}}, "test")


def _resolve(fixed: dict, changes: dict | None = None, baseline: ServingConfig | None = None):
    return resolve_space_and_baseline(
        None, changes or {}, baseline or ServingConfig(), parse_vllm_version("0.33.0"),
        load_hardware("a100-80gb"), load_model("qwen2.5-0.5b").arch, WORKLOAD, fixed=fixed)


def test_fixed_knobs_leave_the_space_and_the_baseline_carries_them() -> None:
    fixed = parse_fix_items(["--max-model-len=4096", "enable_prefix_caching=true",
                             "speculative=default"])
    assert fixed == {"max_model_len": 4096, "enable_prefix_caching": True, "speculative": None}
    space, baseline = _resolve(fixed, baseline=ServingConfig(max_model_len=2048))
    knobs = {d.knob for d in space.dimensions}
    assert knobs and not knobs & set(fixed)
    assert baseline.max_model_len == 4096 and baseline.enable_prefix_caching is True
    assert baseline.speculative is None  # "default": vLLM's own, left unset
    free, _ = _resolve({})
    assert {d.knob for d in free.dimensions} == knobs | {"max_model_len",
                                                          "enable_prefix_caching",
                                                          "speculative"}


def test_stored_labels_give_the_same_values_back() -> None:
    spec = SpeculativeConfig("ngram", 3, prompt_lookup_max=4, prompt_lookup_min=2)
    fixed = parse_fix_items(["gpu_memory_utilization=0.9", f"speculative={spec.to_json()}",
                             "max_num_seqs=default"])
    labels = {k: storage_label(v) for k, v in fixed.items()}
    assert fixed_values(labels) == fixed


@pytest.mark.parametrize(("items", "message"), [
    (["colour=red"], "unknown knob 'colour'"),
    (["max_num_seqs"], "expected knob=value"),
    (["max_num_seqs= "], "expected knob=value"),
    (["max_num_seqs=8,16"], "one value pins a knob"),
    (["max_num_seqs=0"], "--max-num-seqs must be >= 1"),
    (["max_num_seqs=8", "max-num-seqs=16"], "--fix gives max_num_seqs twice"),
])
def test_bad_fix_items(items: list[str], message: str) -> None:
    with pytest.raises(SweetspotError, match=message):
        parse_fix_items(items)


def test_a_knob_both_fixed_and_searched_is_refused() -> None:
    with pytest.raises(SweetspotError, match="given to both --fix and --space"):
        _resolve({"max_num_seqs": 64}, {"max_num_seqs": (32, 64)})
    with pytest.raises(SweetspotError, match="given to both --fix and --space"):
        _resolve({"max_num_seqs": 64}, {"max_num_seqs": None})


def test_a_v0_baseline_keeps_its_chunking_when_max_model_len_is_swept() -> None:
    """0.6.3 chunks prefills by default only over 32K (Llama-3.1-8B: 131,072), with a 512-token
    budget: made explicit, so a trial at a short max_model_len stays valid for vLLM."""
    from sweetspot.engine.validate import validate_config

    arch, hw, version = load_model("llama-3.1-8b").arch, load_hardware("h100"), \
        parse_vllm_version("0.6.3")
    _, baseline = resolve_space_and_baseline(None, {}, ServingConfig(), version, hw, arch,
                                             WORKLOAD)
    assert (baseline.enable_chunked_prefill, baseline.max_num_batched_tokens) == (True, 512)
    short = baseline.replace(max_model_len=4096)
    assert not [p for p in validate_config(short, version, hw, arch) if p.severity == "error"]
    _, v1 = resolve_space_and_baseline(None, {}, ServingConfig(), parse_vllm_version("0.8.0"),
                                       hw, arch, WORKLOAD)
    assert v1.enable_chunked_prefill is None  # V1: always on, nothing to pin
