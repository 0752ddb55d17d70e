import pytest

from sweetspot import SweetspotError
from sweetspot.engine.cmdline import parse_serve_command
from sweetspot.engine.flags import flag_table


def parse(text):
    return parse_serve_command(text, flag_table())


def test_shapes_of_command_lines():
    a = parse("vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 8 --enforce-eager")
    assert a.program == ("vllm", "serve") and a.model == "Qwen/Qwen2.5-7B-Instruct"
    assert [(o.spelling, o.value) for o in a.options] == [
        ("--max-num-seqs", "8"), ("--enforce-eager", None)]
    b = parse("CUDA_VISIBLE_DEVICES=0 python -m vllm.entrypoints.openai.api_server "
              "--model m --port=8001")
    assert b.env == ("CUDA_VISIBLE_DEVICES=0",) and b.model == "m" and b.model_as_option
    assert b.options[0].value == "8001"
    c = parse("vllm serve m \\\n  --speculative-config '{\"method\": \"ngram\"}'")
    assert c.options[0].value == '{"method": "ngram"}'
    assert parse(a.text()).options == a.options


@pytest.mark.parametrize("text, message", [
    ("", "empty command line"),
    ("docker run vllm", "not a vllm serve command line"),
    ("vllm bench serve", "only 'vllm serve'"),
    ("vllm serve m --max-num-seqs", "needs a value"),
    ("vllm serve 'unclosed", "cannot split"),
])
def test_unusable_command_lines(text, message):
    with pytest.raises(SweetspotError, match=message):
        parse(text)
