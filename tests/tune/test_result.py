"""TrialResult: the study's row, typed; JSON only at the store's edge."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.tune.result import TrialResult

ROW = {"config": {"max_num_seqs": 64, "speculative": {"method": "ngram"}}, "status": "ok",
       "cause": None, "metrics": {"output_throughput": 1200.0, "request_throughput": 4.0,
                                  "p99_ttft_ms": 80.0, "failed": 0},
       "memory_bytes": 7 * 2**30, "kv_cache_tokens": 100_000, "offered_rate": 3.5,
       "over_capacity": False, "slo_ok": True, "slo_missed": [], "facts": {"mean_batch": 31.5},
       "seconds": 1.25, "runs": [{"kind": "capacity", "seed": 0}], "number": 3,
       "phase": "ofat", "knob": "max_num_seqs"}


def test_a_stored_row_comes_back_as_it_went_in() -> None:
    result = TrialResult.from_dict(json.loads(json.dumps(ROW)))
    assert result.to_dict() == ROW
    assert result.throughput == 1200.0 and result.request_rate == 4.0
    assert result.ran and result.keeps_up  # 4.0 req/s served, 3.5 offered
    assert not dataclasses.replace(result, offered_rate=4.2).keeps_up
    duplicate = dataclasses.replace(result, duplicate_of=3)
    assert duplicate.to_dict()["duplicate_of"] == 3


def test_it_cannot_be_changed_in_place() -> None:
    result = TrialResult.from_dict(ROW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "oom"  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.metrics["output_throughput"] = 0.0  # type: ignore[index]
    numbered = TrialResult(config={}, status="ok").stored(7, "grid", None)
    assert (numbered.number, numbered.phase, numbered.knob) == (7, "grid", None)


def test_a_failed_trial_has_no_figures() -> None:
    oom = TrialResult(config={"max_num_seqs": 512}, status="oom", cause="CUDA out of memory")
    assert not oom.ran and oom.throughput == 0.0 and oom.to_dict()["metrics"] == {}
    assert "number" not in oom.to_dict()  # not stored yet


@pytest.mark.parametrize(("data", "message"), [
    ({**ROW, "goodput": 1.0}, "unknown field(s) goodput"),
    ({"status": "ok"}, "lacks config"),
])
def test_a_row_it_cannot_read_is_an_error_naming_the_field(data: dict, message: str) -> None:
    with pytest.raises(SweetspotError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrialResult.from_dict(data)


def test_a_study_reads_back_as_it_was_written() -> None:
    from sweetspot.tune.result import StudyResult

    data = {"study": "s", "storage": "sqlite:///x.db", "model": "m", "gpu": "h100",
            "vllm_version": "0.32.0", "workload": "chat", "backend": "sim",
            "objective": "throughput", "slos": {"p99_ttft_ms": 500.0}, "baseline": 3,
            "trials": [ROW], "picks": [{"goal": "max-throughput", "trial": 3, "gain": {},
                                        "reasons": ["your configuration"],
                                        "command": "vllm serve m", "yaml": "model: m\n",
                                        "rivals": [5, 7]}],
            "pareto": [3], "confirmation": None, "settings": {"vllm": {"args": ["-x"]}},
            "rate_search": None, "offered_rate": 3.5, "rate_note": None, "resolution": 0.02}
    study = StudyResult.from_dict(json.loads(json.dumps(data)))
    assert study.to_dict() == data
    assert list(study.to_dict()) == list(data)  # study_data's order: trials.json stays as it was
    assert study.baseline_trial is not None and study.baseline_trial.throughput == 1200.0
    assert study.trial(99) is None and study.picks[0].trial == 3
    bare = StudyResult.from_dict({"study": "only-a-name"})  # interrupted before any trial
    assert bare.trials == () and bare.baseline_trial is None and bare.picks == ()
