"""launch_server against the real CPU build of vLLM, and its clean-up against a stand-in.

The real tests share one server per session (``conftest.py``; CPU start-up takes about a
minute); the tests that need their own launch (an exception inside the block, a bad flag) start
their own. The stand-in
tests put a fake ``vllm.entrypoints.openai.api_server`` on PYTHONPATH so the SIGKILL path and a
start-up crash are checked in a second, without vLLM.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from sweetspot.backends.vllm import ServerHandle, ServerStartError, launch_server
from sweetspot.testing.tiny_model import TinyModel
from sweetspot.testing.vllm_bench import run_vllm_bench_serve
from tests.backends.vllm.conftest import (
    SERVER_ARGS,
    assert_group_gone,
    assert_port_free,
    port_of,
)

KV_CACHE_GIB = 2  # launch_server's default VLLM_CPU_KVCACHE_SPACE
# Tiny model: 2 (K and V) x 2 layers x 2 KV heads x 64 head dim x 2 bytes (bf16).
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 64 * 2
MAX_MODEL_LEN = 4096
# >= 0.30 prints one line ("CPU KV cache size: N tokens, Maximum concurrency for M tokens per
# request: X.XXx"), <= 0.27 two ("GPU KV cache size: N tokens" / "Maximum concurrency for …").
KV_CACHE_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


# --- real vLLM (CPU build) ------------------------------------------------------------------


@pytest.mark.vllm
def test_completion_has_exact_token_counts(server: ServerHandle, tiny: TinyModel) -> None:
    started_s = time.monotonic()
    reply = post_json(f"{server.base_url}/v1/completions", {
        "model": str(tiny.model_dir),
        "prompt": list(range(100, 116)),
        "max_tokens": 8,
        "ignore_eos": True,
    })
    latency_s = time.monotonic() - started_s
    assert reply["usage"]["prompt_tokens"] == 16
    assert reply["usage"]["completion_tokens"] == 8
    assert len(reply["choices"][0]["text"].split()) == 8  # one word per token
    assert latency_s < 30


@pytest.mark.vllm
def test_log_reports_the_kv_cache_size(server: ServerHandle) -> None:
    log = server.log_path.read_text(errors="replace")
    tokens = KV_CACHE_TOKENS.search(log)
    concurrency = MAX_CONCURRENCY.search(log)
    assert tokens and concurrency, "no KV cache size line in the server log"
    kv_tokens = int(tokens.group(1).replace(",", ""))
    assert kv_tokens == KV_CACHE_GIB * 2**30 // KV_BYTES_PER_TOKEN
    assert int(concurrency.group(1).replace(",", "")) == MAX_MODEL_LEN
    assert float(concurrency.group(2)) == pytest.approx(kv_tokens / MAX_MODEL_LEN)


@pytest.mark.vllm
def test_vllm_bench_serve_completes_every_prompt(
    server: ServerHandle, tiny: TinyModel, vllm_python: Path, tmp_path: Path
) -> None:
    result = run_vllm_bench_serve(
        vllm_python, server.base_url, str(tiny.model_dir),
        tokenizer=tiny.tokenizer_dir, num_prompts=20, input_len=32, output_len=16,
        result_path=tmp_path / "bench.json",
    )
    assert result["completed"] == 20
    assert result["failed"] == 0
    assert result["total_input_tokens"] == 20 * 32
    assert result["total_output_tokens"] == 20 * 16
    assert result["p99_ttft_ms"] > 0


@pytest.mark.vllm
def test_exception_inside_stops_the_whole_group(
    vllm_python: Path, tiny: TinyModel, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="trial failed"), launch_server(
        vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir, args=SERVER_ARGS,
        log_path=tmp_path / "vllm.log", dummy_weights=True,
    ) as handle:
        os.killpg(handle.pid, 0)  # the group is alive here
        raise RuntimeError("trial failed")
    assert_group_gone(handle.pid)
    assert_port_free(port_of(handle))


@pytest.mark.vllm
def test_bad_argument_fails_fast_with_the_log_tail(
    vllm_python: Path, tiny: TinyModel, tmp_path: Path
) -> None:
    started_s = time.monotonic()
    with pytest.raises(ServerStartError) as caught, launch_server(
        vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
        args=[*SERVER_ARGS, "--max-num-seqs", "abc"], log_path=tmp_path / "vllm.log",
        dummy_weights=True,
    ):
        pytest.fail("the server started with --max-num-seqs abc")
    assert time.monotonic() - started_s < 120  # argparse fails before any engine starts
    assert "invalid int value: 'abc'" in str(caught.value)
    assert str(tmp_path / "vllm.log") in str(caught.value)
    assert any("--max-num-seqs" in line for line in caught.value.log_tail)


# --- a stand-in server: clean-up paths in a second ------------------------------------------

FAKE_API_SERVER = textwrap.dedent("""\
    import argparse, http.server, signal, subprocess, sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--crash", action="store_true")
    args, _ = parser.parse_known_args()
    if args.crash:
        print("ValueError: pretend the engine failed", flush=True)
        sys.exit(3)
    # Like a stuck engine: this process and its child ignore SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

    http.server.HTTPServer(("127.0.0.1", args.port), Health).serve_forever()
""")


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_API_SERVER)
    return {"PYTHONPATH": str(tmp_path / "fake")}


def test_group_ignoring_sigterm_is_killed(fake_env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), launch_server(
        sys.executable, tmp_path, env=fake_env, log_path=tmp_path / "fake.log",
        stop_timeout_s=0.5, startup_timeout_s=30,
    ) as handle:
        raise KeyboardInterrupt
    assert_group_gone(handle.pid)
    assert_port_free(port_of(handle))


def test_crash_during_start_up_names_the_error(fake_env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ServerStartError) as caught, launch_server(
        sys.executable, tmp_path, env=fake_env, args=["--crash"],
        log_path=tmp_path / "fake.log", startup_timeout_s=30,
    ):
        pytest.fail("the fake server was meant to crash")
    assert "exited with code 3" in str(caught.value)
    assert "ValueError: pretend the engine failed" in str(caught.value)
