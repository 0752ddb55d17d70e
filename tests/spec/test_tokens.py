"""Recorded text counted with the model's tokenizer (--tokenizer), or estimated at 4 characters
a token, and the workload says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.tokens import estimate_tokens, tokenizer_counter
from sweetspot.testing.tiny_model import make_tiny_model
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "m").tokenizer_dir


def _sharegpt(path: Path) -> Path:
    # Words of the tiny model's WordLevel vocabulary: "w12 " is 4 characters and one token,
    # "w1234 " 6 characters and one token: the estimate is right for the first, not the second.
    conversations = [{"conversations": [{"from": "human", "value": " ".join(["w12"] * 40)},
                                        {"from": "gpt", "value": " ".join(["w1234"] * 30)}]}]
    path.write_text(json.dumps(conversations))
    return path


def test_a_tokenizer_counts_what_the_estimate_guesses(tokenizer_dir: Path,
                                                      tmp_path: Path) -> None:
    count = tokenizer_counter(tokenizer_dir)
    assert count("w1 w2 w3") == 3 and count(str(tokenizer_dir)) >= 1  # never 0
    assert tokenizer_counter(tokenizer_dir / "tokenizer.json")("w7") == 1
    path = _sharegpt(tmp_path / "chat.json")
    counted = load_workload(str(path), count)
    assert [(e.prompt_tokens, e.output_tokens) for e in counted.trace] == [(40, 30)]
    assert counted.description.endswith("text counted with the tokenizer")
    estimated = load_workload(str(path))
    assert estimated.trace[0].output_tokens == estimate_tokens(" ".join(["w1234"] * 30)) == 45
    assert "estimated at 4 characters a token" in estimated.description
    traced = tmp_path / "counts.jsonl"  # token counts given: nothing to count, nothing said
    traced.write_text(json.dumps({"prompt_tokens": 5, "output_tokens": 3}) + "\n")
    assert load_workload(str(traced)).description == f"recorded requests from {traced}"


def test_a_missing_or_broken_tokenizer_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SweetspotError, match="no tokenizer at"):
        tokenizer_counter(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(SweetspotError, match="cannot read the tokenizer"):
        tokenizer_counter(tmp_path)
    result = run_cli("tune", "--workload", str(_sharegpt(tmp_path / "c.json")), "--tokenizer",
                     str(tmp_path / "absent"), "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: no tokenizer at {tmp_path / 'absent'}: counting tokens needs a tokenizer.json "
        "(a model folder's, or the file)"]
