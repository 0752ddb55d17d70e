import json

import pytest

from sweetspot import SweetspotError
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import workload_stats


def test_sharegpt_file(tmp_path):
    conversations = [
        {"id": "a", "conversations": [{"from": "human", "value": "x" * 400},
                                      {"from": "gpt", "value": "y" * 800}]},
        {"id": "short", "conversations": [{"from": "human", "value": "hi"},
                                          {"from": "gpt", "value": "y" * 80}]},
        {"id": "one-turn", "conversations": [{"from": "human", "value": "x" * 40}]},
        {"id": "b", "conversations": [{"from": "human", "value": "x" * 40},
                                      {"from": "gpt", "value": "y" * 40}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    spec = load_workload(str(path))
    assert [(e.prompt_tokens, e.output_tokens) for e in spec.trace] == [(100, 200), (10, 10)]
    assert spec.arrival.process == "inf"
    requests = sample_requests(spec, 4, vocab_size=4096)
    assert [r.prompt_tokens for r in requests] == [100, 10, 100, 10]
    assert requests[0].prompt_text == "x" * 400


def test_jsonl_trace_with_timestamps_and_priorities(tmp_path):
    lines = [{"prompt_tokens": 50, "output_tokens": 5, "timestamp": 10.0, "priority": 1},
             {"prompt": "a b c d", "max_tokens": 7, "timestamp": 10.5},
             {"prompt_tokens": 30, "output_len": 9, "timestamp": 11.0}]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    spec = load_workload(str(path))
    requests = sample_requests(spec, 3, vocab_size=4096)
    assert [r.arrival_s for r in requests] == [0.0, 0.5, 1.0]
    assert [r.output_tokens for r in requests] == [5, 7, 9]
    assert [r.priority for r in requests] == [1, 0, 0]
    assert workload_stats(spec).arrival_rate == pytest.approx(2.0)


def test_vllm_custom_format(tmp_path):
    path = tmp_path / "custom.jsonl"
    path.write_text('{"prompt": "tell me a story", "output_tokens": 64}\n')
    spec = load_workload(str(path))
    assert spec.trace[0].output_tokens == 64 and spec.trace[0].prompt_text == "tell me a story"


@pytest.mark.parametrize("name, text, message", [
    ("a.jsonl", '{"prompt_tokens": 5}\n', "line 1: needs 'output_tokens'"),
    ("b.jsonl", '{"prompt_tokens": 5, "output_tokens": 3}\nnot json\n', "line 2"),
    ("c.jsonl", '[1, 2]\n', "expected a JSON object"),
    ("d.jsonl", '{"output_tokens": 3}\n', "needs 'prompt' text or 'prompt_tokens'"),
    ("e.jsonl", '{"prompt_tokens": "many", "output_tokens": 3}\n', "line 1"),
    ("f.jsonl", "\n\n", "no usable request"),
    ("g.json", "[{\"conversations\": [{\"from\": \"human\"}, {\"value\": 1}]}]",
     "lacks 'value'"),
    ("h.json", "{not json", "cannot read workload file"),
])
def test_malformed_trace_files(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SweetspotError, match=message) as info:
        load_workload(str(path))
    assert "\n" not in str(info.value)
