import json

import pytest

from sweetspot import SweetspotError
from sweetspot.spec.hardware import GiB
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization

# Published parameter counts (model cards), in billions: total, active.
PUBLISHED = {
    "qwen2.5-0.5b": (0.494, 0.494),
    "qwen2.5-7b": (7.62, 7.62),
    "qwen2.5-14b": (14.7, 14.7),
    "qwen2.5-72b": (72.7, 72.7),
    "llama-3.1-8b": (8.03, 8.03),
    "llama-3.1-70b": (70.6, 70.6),
    "mistral-7b": (7.25, 7.25),
    "mixtral-8x7b": (46.7, 12.9),
    "qwen3-30b-a3b": (30.5, 3.3),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_model_cards(name):
    counts = load_model(name).arch.param_counts()
    total, active = PUBLISHED[name]
    assert counts.total / 1e9 == pytest.approx(total, rel=0.015)
    assert counts.active / 1e9 == pytest.approx(active, rel=0.03)


def test_kv_bytes_per_token_formula():
    arch = load_model("qwen2.5-14b").arch
    assert arch.kv_bytes_per_token() == 2 * 48 * 8 * 128 * 2 == 196_608
    assert arch.kv_bytes_per_token("fp8") == 98_304
    assert arch.kv_bytes_per_token(tensor_parallel_size=2) == 98_304


def test_awq_weights_are_about_a_third_of_bf16():
    arch = load_model("qwen2.5-14b").arch
    bf16 = arch.weight_bytes(load_quantization("bf16"))
    awq = arch.weight_bytes(load_quantization("awq"))
    assert bf16 / GiB == pytest.approx(27.5, rel=0.02)
    # Qwen2.5-14B-Instruct-AWQ's safetensors are 9.98 GB (embeddings and head stay 16-bit).
    assert awq / 1e9 == pytest.approx(9.98, rel=0.03)


def test_flops_per_token_grows_with_context():
    arch = load_model("llama-3.1-8b").arch
    # 2 FLOPs per weight a token multiplies with: all but the embedding lookup table.
    counts = arch.param_counts()
    assert arch.flops_per_token(0) == pytest.approx(2 * (counts.total - counts.embedding), rel=1e-3)
    assert arch.flops_per_token(4096) > arch.flops_per_token(0)


@pytest.mark.parametrize("ref, name, quant", [
    ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b", None),
    ("Qwen/Qwen2.5-14B-Instruct-AWQ", "qwen2.5-14b", "awq"),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b", "gptq"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b", None),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8"),
])
def test_hub_ids_resolve_with_their_quantisation(ref, name, quant):
    resolved = load_model(ref)
    assert resolved.arch.name == name
    assert (resolved.quantization.name if resolved.quantization else None) == quant


def test_local_folder_config(qwen_folder):
    arch = load_model(str(qwen_folder)).arch
    assert arch.name == "my-qwen"
    assert arch.param_counts().total == load_model("qwen2.5-7b").arch.param_counts().total


def test_config_missing_fields_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(SweetspotError, match="missing fields: num_hidden_layers"):
        load_model(str(tmp_path))


def test_config_malformed_value_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": "wide", "num_hidden_layers": 2, "num_attention_heads": 2,
        "vocab_size": 10}))
    with pytest.raises(SweetspotError, match="malformed value"):
        load_model(str(tmp_path))


def test_unknown_model_is_a_clear_error():
    with pytest.raises(SweetspotError, match="unknown model 'gpt-5'"):
        load_model("gpt-5")
