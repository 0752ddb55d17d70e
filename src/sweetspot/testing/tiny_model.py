"""A tiny Qwen2 model for ``--load-format dummy``: a config.json and a word-level tokenizer.

vLLM with dummy weights needs no weight files, only the model's ``config.json`` and a tokenizer.
The tokenizer lives in its own folder (passed with ``--tokenizer``): next to a Qwen2 config.json,
transformers would pick Qwen2Tokenizer and ignore tokenizer.json.

The vocabulary is ``w0 … w{vocab-1}``, one word per token, split on whitespace and joined back
with single spaces, so text of N known words is exactly N tokens and decoding what was encoded
gives the text back. That makes prompt lengths in tests exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

__all__ = ["TinyModel", "make_tiny_model"]

# Unknown words map to w0, which doubles as bos/eos: a real tokenizer would add special tokens,
# but those would push the vocabulary past the model's vocab_size.
_SPECIAL = "w0"


@dataclass(frozen=True, slots=True)
class TinyModel:
    model_dir: Path  # config.json only (Qwen2ForCausalLM); pass as --model
    tokenizer_dir: Path  # tokenizer.json + tokenizer_config.json; pass as --tokenizer


TOKENIZER_CONFIG = {"model_type": "gpt_bigcode"}


def make_tiny_model(
    folder: Path | str,
    *,
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 512,
    vocab: int = 4096,
    max_position: int = 4096,
    tie_embeddings: bool = True,
) -> TinyModel:
    """Write ``<folder>/model/config.json`` and ``<folder>/tokenizer/``; return both paths."""
    if hidden % heads or heads % kv_heads:
        raise ValueError(
            f"hidden ({hidden}) must divide by heads ({heads}) and heads by kv_heads ({kv_heads})"
        )
    if vocab < 2:
        raise ValueError(f"vocab must be at least 2, got {vocab}")
    folder = Path(folder)
    model_dir = folder / "model"
    tokenizer_dir = folder / "tokenizer"
    model_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)

    config = _qwen2_config(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                           intermediate=intermediate, vocab=vocab, max_position=max_position,
                           tie_embeddings=tie_embeddings)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # vLLM parses a config.json beside the tokenizer too: without one it fails, sleeps 2 s and
    # retries, in the API server and again in the engine (~4 s of a ~30 s CPU-build start). The
    # model's own config would make transformers pick Qwen2Tokenizer, which drops the spaces of
    # the word-level vocabulary; gpt_bigcode's tokenizer is the generic one over tokenizer.json.
    (tokenizer_dir / "config.json").write_text(json.dumps(TOKENIZER_CONFIG) + "\n")
    _write_tokenizer(tokenizer_dir, vocab, max_position)
    return TinyModel(model_dir=model_dir, tokenizer_dir=tokenizer_dir)


def _qwen2_config(*, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int,
                  vocab: int, max_position: int, tie_embeddings: bool) -> dict:
    """A Qwen2ForCausalLM config.json of this shape: all vLLM reads with dummy weights."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "max_position_embeddings": max_position,
        "max_window_layers": layers,
        "use_sliding_window": False,
        "sliding_window": None,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": tie_embeddings,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 0,
        "use_cache": True,
    }


def _write_tokenizer(tokenizer_dir: Path, vocab: int, max_position: int) -> None:
    """tokenizer.json (the word-level vocabulary) and a tokenizer_config.json that makes
    transformers load it as a fast tokenizer with w0 as every special token."""
    _word_tokenizer(vocab).save(str(tokenizer_dir / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_position,
        "clean_up_tokenization_spaces": False,
        "bos_token": _SPECIAL,
        "eos_token": _SPECIAL,
        "unk_token": _SPECIAL,
    }
    (tokenizer_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2) + "\n"
    )


def _word_tokenizer(vocab: int) -> Tokenizer:
    words = {f"w{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token=_SPECIAL))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins tokens with single spaces; no token starts with "##", and
    # cleanup=False keeps it from touching punctuation spacing.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return tokenizer
