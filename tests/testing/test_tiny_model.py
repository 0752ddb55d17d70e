"""The tiny model's files: a Qwen2 config and a word-level tokenizer with exact round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from sweetspot.testing.tiny_model import TinyModel, make_tiny_model


@pytest.fixture
def tiny(tmp_path: Path) -> TinyModel:
    return make_tiny_model(tmp_path)


def test_layout(tiny: TinyModel, tmp_path: Path) -> None:
    assert tiny.model_dir == tmp_path / "model"
    assert tiny.tokenizer_dir == tmp_path / "tokenizer"
    assert sorted(p.name for p in tiny.model_dir.iterdir()) == ["config.json"]
    assert sorted(p.name for p in tiny.tokenizer_dir.iterdir()) == [
        "config.json", "tokenizer.json", "tokenizer_config.json",
    ]
    # Not the model's config beside the tokenizer: with qwen2 transformers would load
    # Qwen2Tokenizer, which decodes the word-level vocabulary without its spaces.
    assert json.loads((tiny.tokenizer_dir / "config.json").read_text()) == {
        "model_type": "gpt_bigcode"}


def test_config_is_a_small_qwen2(tiny: TinyModel) -> None:
    config = json.loads((tiny.model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["model_type"] == "qwen2"
    assert config["torch_dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is True
    assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 256)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert (config["intermediate_size"], config["vocab_size"]) == (512, 4096)
    assert config["max_position_embeddings"] == 4096


def test_sizes_are_passed_through(tmp_path: Path) -> None:
    tiny = make_tiny_model(tmp_path, layers=3, hidden=128, heads=8, kv_heads=8, vocab=100,
                           max_position=512)
    config = json.loads((tiny.model_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (3, 128)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (8, 8)
    assert config["vocab_size"] == 100
    tokenizer = Tokenizer.from_file(str(tiny.tokenizer_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 100
    tokenizer_config = json.loads((tiny.tokenizer_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 512


def test_tokenizer_round_trips_exactly(tiny: TinyModel) -> None:
    tokenizer = Tokenizer.from_file(str(tiny.tokenizer_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 4096
    encoding = tokenizer.encode("w1 w2 w3")
    assert encoding.ids == [1, 2, 3]
    assert tokenizer.decode(encoding.ids) == "w1 w2 w3"
    text = " ".join(f"w{i}" for i in range(4095, 0, -97))
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_text_of_n_words_is_n_tokens(tiny: TinyModel) -> None:
    tokenizer = Tokenizer.from_file(str(tiny.tokenizer_dir / "tokenizer.json"))
    assert len(tokenizer.encode("  w7\tw8\n w9  ").ids) == 3
    ids = list(range(100, 116))
    assert tokenizer.encode(tokenizer.decode(ids)).ids == ids


def test_tokenizer_config_names_the_fast_tokenizer(tiny: TinyModel) -> None:
    tokenizer_config = json.loads((tiny.tokenizer_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"


@pytest.mark.parametrize("sizes", [{"hidden": 250}, {"heads": 4, "kv_heads": 3}, {"vocab": 1}])
def test_rejects_inconsistent_sizes(tmp_path: Path, sizes: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        make_tiny_model(tmp_path, **sizes)
