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
