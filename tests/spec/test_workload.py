import json

import numpy as np
import pytest

from sweetspot import SweetspotError
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.workload import PRESETS, preset, workload_stats


def test_presets_have_the_advertised_shapes():
    assert set(PRESETS) >= {"chat", "short", "long", "rag"}
    short, long_ = workload_stats(preset("short")), workload_stats(preset("long"))
    assert short.prompt.max < 512
    assert long_.prompt.p50 > 2048
    chat = workload_stats(preset("chat"))
    assert chat.prefix_share == 1.0  # one fixed system prompt on every request
    rag = workload_stats(preset("rag"))
    assert rag.output.p50 < rag.prompt.p50 / 10


def test_sampling_is_seeded():
    spec = preset("chat")
    a = spec.sample_lengths(100, seed=3)
    b = spec.sample_lengths(100, seed=3)
    c = spec.sample_lengths(100, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_workload_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "prompt: {kind: fixed, value: 1000}\n"
        "output: {kind: uniform, low: 10, high: 30}\n"
        "prefix: {length: 200, share: 0.5}\n"
        "priorities:\n  - {name: a, priority: 0, share: 0.25}\n"
        "  - {name: b, priority: 1, share: 0.75}\n"
    )
    spec = load_workload(str(path))
    stats = workload_stats(spec)
    assert spec.name == "mine"
    assert stats.prompt.p50 in (1000, 1200)
    assert 0.45 < stats.prefix_share < 0.55
    assert 10 <= stats.output.p50 <= 30


@pytest.mark.parametrize("text, message", [
    ("prompt: {kind: fixed}\noutput: {kind: fixed, value: 3}\n", "prompt.fixed.value"),
    ("prompt: {kind: zipf, a: 2}\noutput: {kind: fixed, value: 3}\n", "prompt"),
    ("- just a list\n", "expected a mapping"),
    ("prompt: [unclosed\n", "cannot read workload file"),
    ("prompt: {kind: uniform, low: 9, high: 2}\noutput: {kind: fixed, value: 3}\n", "high"),
    ("prompt: {kind: fixed, value: 3}\noutput: {kind: fixed, value: 3}\n"
     "priorities: [{name: a, priority: 0, share: 0.5}]\n", "add up to 1"),
])
def test_malformed_workload_files_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SweetspotError, match=message) as info:
        load_workload(str(path))
    assert "\n" not in str(info.value)


def test_json_workload_and_missing_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"prompt": {"kind": "fixed", "value": 5},
                                "output": {"kind": "fixed", "value": 7}}))
    assert workload_stats(load_workload(str(path))).total.p99 == 12
    with pytest.raises(SweetspotError, match="not a file and not a preset"):
        load_workload(str(tmp_path / "nope.yaml"))
