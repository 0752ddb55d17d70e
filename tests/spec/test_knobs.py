import pytest
from packaging.version import Version

import sweetspot.spec.version as version_module
from sweetspot import SweetspotError
from sweetspot.spec.knobs import (
    KNOBS,
    ServingConfig,
    SpeculativeConfig,
    knob,
)
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, NotARelease
from sweetspot.spec.version import parse_vllm_version as v


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
    assert v("0.6.0") < v("0.6.3") < v("0.7.3") < v("0.8.0")  # the V0 releases
    with pytest.raises(SweetspotError, match="not a vLLM version"):
        v("newest")
    with pytest.raises(SweetspotError, match="older than the oldest release sweetspot knows "
                                             r"\(0.6.0\)"):
        v("0.5.4")


@pytest.mark.parametrize(("text", "taken", "note"), [
    ("0.19.1.dev12+gabc", "0.19.1", "development release build: taken as 0.19.1"),
    ("0.11.0rc2", "0.11.0", "pre-release build: taken as 0.11.0"),
    ("nightly", str(DEFAULT_VLLM_VERSION), "the newest release sweetspot has checked"),
    ("main", str(DEFAULT_VLLM_VERSION), "the newest release sweetspot has checked"),
])
def test_builds_that_are_not_releases_are_taken_as_one_with_a_note(text, taken, note,
                                                                    monkeypatch):
    monkeypatch.setattr(version_module, "_NOTED", set())  # noted once a process
    with pytest.warns(NotARelease, match=note):
        assert v(text) == Version(taken)
