"""``load_baseline``: a bench result, a report's trials.json, malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.guard.baseline import load_baseline
from sweetspot.spec.workload import preset, workload_to_dict


def _bench_result(tmp_path: Path) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({
        "duration": 20.0, "completed": 100, "output_throughput": 900.0,
        "p99_ttft_ms": 120.0, "median_ttft_ms": 40.0, "p99_tpot_ms": 12.0,
        "slos": {"p99_ttft_ms": {"limit_ms": 300.0, "measured_ms": 120.0, "met": True,
                                 "per_request": False}},
        "server": {"preemptions": 4, "peak_kv_cache_usage": 0.4},
        "sweetspot": {"model": "m", "rate": 5.0, "workload_spec": workload_to_dict(
            preset("short"))},
    }))
    return path


def test_a_bench_result_is_an_envelope_without_capacity(tmp_path: Path) -> None:
    envelope = load_baseline(str(_bench_result(tmp_path)))
    assert envelope.measured and envelope.capacity_rps is None
    assert envelope.p99_ms == {"ttft": 120.0, "tpot": 12.0}
    assert envelope.slos == {"p99_ttft_ms": 300.0}
    assert envelope.offered_rate == 5.0 and envelope.preemptions_per_s == pytest.approx(0.2)
    assert envelope.workload is not None and envelope.workload["name"] == "short"


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("{not json", "malformed baseline"),
    ("[1, 2]", "expected a JSON object"),
    ('{"completed": 3}', "no p99_*_ms latency"),
    ('{"p99_ttft_ms": "fast"}', "expected a number"),
])
def test_malformed_baselines_are_one_line_errors(tmp_path: Path, content: str | None,
                                                 message: str) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SweetspotError, match=message.replace("*", r"\*")) as info:
        load_baseline(str(path))
    assert "\n" not in str(info.value)


def test_a_study_name_needs_a_study(tmp_path: Path) -> None:
    with pytest.raises(SweetspotError, match="no study named 'nope'"):
        load_baseline("nope:balanced", f"sqlite:///{tmp_path / 'studies.db'}")
