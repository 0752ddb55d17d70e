"""compare of two saved results: a paired bootstrap over the requests both files hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sweetspot.backends.records import RequestRecord
from sweetspot.guard.compare import ComparePlan
from sweetspot.guard.files import compare_files
from sweetspot.guard.metrics import DEFAULT_GUARDED
from sweetspot.guard.requests import detailed_arrays
from sweetspot.guard.summary import markdown
from sweetspot.metrics.serve import compute_result

PLAN = ComparePlan(DEFAULT_GUARDED)


def _records(slowdown: float, n: int = 200, seed: int = 0) -> list[RequestRecord]:
    """``n`` requests of 16 tokens; each request's own TTFT and gap, times ``slowdown`` (and
    a little noise of its own run)."""
    rng = np.random.default_rng(seed)
    own = np.random.default_rng(99)  # the requests: the same in both files
    base_ttft, base_gap = own.lognormal(np.log(0.05), 0.6, n), own.lognormal(np.log(0.01),
                                                                              0.3, n)
    noise = np.exp(rng.normal(0, 0.02, n))
    records = []
    for i in range(n):
        sent = i * 0.1
        first = sent + base_ttft[i] * slowdown * noise[i]
        chunks = tuple(first + k * base_gap[i] * slowdown * noise[i] for k in range(16))
        records.append(RequestRecord(i, sent, sent, chunks, chunks[-1], 100, 16))
    return records


def _save(path: Path, records: list[RequestRecord], detailed: bool = True,
          vllm: bool = False) -> Path:
    data = compute_result(records).to_dict()
    if detailed:
        data.update(detailed_arrays(records))
        if vllm:  # vLLM's --save-detailed has no e2els
            del data["e2els"]
    path.write_text(json.dumps(data))
    return path


def test_slower_latencies_are_a_regression_and_throughput_is_undecided(tmp_path):
    a = _save(tmp_path / "a.json", _records(1.0))
    b = _save(tmp_path / "b.json", _records(1.15, seed=1), vllm=True)
    c = compare_files(a, b, PLAN)
    by_key = {m.metric.key: m for m in c.metrics}
    assert by_key["p99_tpot_ms"].verdict == "worse" and by_key["p99_tpot_ms"].regression
    assert 0.10 < by_key["p99_ttft_ms"].change < 0.20
    assert by_key["output_throughput"].low is None  # one run each: no interval
    assert by_key["output_throughput"].verdict == "no significant difference"
    assert c.verdict == "worse" and c.source == "files"
    text = markdown(c)
    assert "| P99 TPOT (ms) * |" in text and "one run each" in text


def test_the_same_requests_show_no_difference(tmp_path):
    a = _save(tmp_path / "a.json", _records(1.0))
    b = _save(tmp_path / "b.json", _records(1.0, seed=1))
    c = compare_files(a, b, PLAN)
    assert c.verdict == "no significant difference", [m.to_dict() for m in c.metrics]


def test_files_without_per_request_data_report_differences_undecided(tmp_path):
    a = _save(tmp_path / "a.json", _records(1.0), detailed=False)
    b = _save(tmp_path / "b.json", _records(1.5, seed=1), detailed=False)
    c = compare_files(a, b, PLAN)
    assert c.verdict == "no significant difference"
    assert all(m.low is None for m in c.metrics if m.metric.key != "failed")
    assert any("no per-request data" in note for note in c.notes)
