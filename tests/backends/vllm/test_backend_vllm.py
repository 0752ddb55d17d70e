"""Real trials on the CPU build of vLLM: launched, measured, classified, always cleaned up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.vllm import VllmBackend
from sweetspot.backends.vllm.memory import group_pids
from sweetspot.spec.requests import Request
from sweetspot.testing.tiny_model import TinyModel, make_tiny_model
from tests.backends.vllm.conftest import SERVER_ARGS
from tests.backends.vllm.test_backend import _wait_ready, assert_gone
from tests.conftest import run_cli

pytestmark = pytest.mark.vllm


def _launch(vllm_python: Path, tiny: TinyModel, out: Path, trials: Path, *serve_args: str,
            n: int = 48) -> subprocess.CompletedProcess:
    return run_cli("bench", "--launch", "--dummy-weights", "--vllm-python", str(vllm_python),
                   "--workload", "short", "--num-requests", str(n), "--rate", "inf", "--seed",
                   "7", "--trials-dir", str(trials), "--json", str(out), "--",
                   str(tiny.model_dir), "--tokenizer", str(tiny.tokenizer_dir), *SERVER_ARGS,
                   *serve_args)


@pytest.mark.serial  # two servers' throughputs compared: not beside other tests
def test_more_seqs_more_throughput_with_kv_tokens(vllm_python: Path, tiny: TinyModel,
                                                  tmp_path: Path) -> None:
    results = {}
    for seqs in (2, 32):
        out = tmp_path / f"mns{seqs}.json"
        done = _launch(vllm_python, tiny, out, tmp_path / "trials", "--max-num-seqs", str(seqs))
        assert done.returncode == 0, done.stderr + done.stdout
        data = json.loads(out.read_text())
        trial = data["trial"]
        assert trial["status"] == "ok" and data["completed"] == 48
        assert trial["weights"] == "dummy" and "--load-format" in trial["argv"]
        assert trial["startup"]["kv_cache_tokens"] > 100_000  # 2 GiB of a 1 KiB/token model
        assert trial["startup"]["device"] == "CPU"
        assert trial["memory"]["host_rss_bytes"] > 2**30
        assert trial["timings"]["teardown_s"] > 0
        assert_gone(trial["server_pids"])
        results[seqs] = data["output_throughput"]
    assert results[32] > 1.5 * results[2], results


def test_max_model_len_beyond_kv_capacity_is_oom(vllm_python: Path, tmp_path: Path) -> None:
    """16 layers x 4 KV heads x 64 dims: 16 KiB per token, so 1 GiB holds 65,536 tokens,
    fewer than one 131,072-token request needs."""
    model = make_tiny_model(tmp_path / "deep", layers=16, kv_heads=4, max_position=131_072)
    backend = VllmBackend(model.model_dir, tokenizer_dir=model.tokenizer_dir,
                          trials_dir=tmp_path / "trials", python=vllm_python,
                          env={"VLLM_CPU_KVCACHE_SPACE": "1"}, dummy_weights=True)
    requests = [Request(i, 0.0, tuple(range(16)), 8) for i in range(4)]
    trial = backend.run_args([*SERVER_ARGS, "--max-model-len", "131072"], requests,
                             LoadConfig(base_url="", model=""))
    assert trial.status == "oom", (trial.cause, trial.log_lines)
    assert "max seq len (131072)" in trial.cause  # vLLM's own message
    assert "larger than the available KV cache memory" in trial.cause
    assert trial.run is None
    assert trial.server_pids and group_pids(trial.server_pid) == []
    assert_gone(trial.server_pids)


def test_bad_choice_is_invalid_before_any_process(vllm_python: Path, tiny: TinyModel,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "lof.json"
    started = time.monotonic()
    done = _launch(vllm_python, tiny, out, tmp_path / "trials", "--scheduling-policy", "lof")
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    trial = json.loads(out.read_text())["trial"]
    assert trial["status"] == "invalid"
    assert trial["cause"] == ("argument --scheduling-policy: invalid choice: 'lof' "
                              "(choose from 'fcfs', 'priority')")
    assert trial["server_pid"] is None and not (tmp_path / "trials").exists()
    assert elapsed < 30, elapsed  # the parser is read once per interpreter, then cached


def test_interrupted_trial_leaves_no_vllm_process(vllm_python: Path, tiny: TinyModel,
                                                  tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweetspot.cli", "bench", "--launch", "--dummy-weights",
         "--vllm-python", str(vllm_python), "--workload", "long", "--num-requests", "200",
         "--rate", "inf", "--trials-dir", str(tmp_path), "--", str(tiny.model_dir),
         "--tokenizer", str(tiny.tokenizer_dir), *SERVER_ARGS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pgid = _wait_ready(proc, timeout_s=300)
    time.sleep(3.0)  # mid-run: engine core and workers busy
    pids = group_pids(pgid)
    assert len(pids) >= 2  # the API server and its engine
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert group_pids(pgid) == []
    assert_gone(pids)


def test_a_value_vllm_refuses_is_invalid_at_once_in_its_words(vllm_python: Path, tiny: TinyModel,
                                                              tmp_path: Path) -> None:
    """--max-model-len beyond the model's is refused in milliseconds with no process started,
    with the sentence the real server says seconds later (checked against it here)."""
    from sweetspot.backends.vllm.server import ServerStartError, launch_server

    backend = VllmBackend(str(tiny.model_dir), trials_dir=tmp_path / "trials",
                          tokenizer_dir=str(tiny.tokenizer_dir), python=str(vllm_python),
                          dummy_weights=True)
    backend.check([])  # the installed vLLM's flags, read once and cached: not what is timed
    started = time.monotonic()
    trial = backend.run_args(["--max-model-len", "1000000", *SERVER_ARGS],
                             [Request(0, 0.0, tuple(range(5, 21)), 4)], LoadConfig("", ""))
    assert time.monotonic() - started <= 1.0
    assert trial.status == "invalid" and not (tmp_path / "trials").exists()
    headline = "User-specified max_model_len (1000000) is greater than the derived max_model_len"
    assert trial.cause.startswith(headline)
    with pytest.raises(ServerStartError), launch_server(
            vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
            args=["--max-model-len", "1000000", *SERVER_ARGS], dummy_weights=True,
            log_path=tmp_path / "real.log", startup_timeout_s=300):
        pytest.fail("vLLM started with max-model-len 1000000")
    assert headline in (tmp_path / "real.log").read_text()


def test_a_real_server_with_an_api_key(vllm_python: Path, tiny: TinyModel,
                                       tmp_path: Path) -> None:
    """vLLM started with --api-key serves requests with its key (which the launcher sends by
    itself); the same server refuses requests with another key (401), and a run of only those
    fails the trial as "auth"."""
    backend = VllmBackend(str(tiny.model_dir), trials_dir=tmp_path / "trials",
                          tokenizer_dir=str(tiny.tokenizer_dir), python=str(vllm_python),
                          dummy_weights=True)
    requests = [Request(i, 0.0, tuple(range(5, 21)), 4) for i in range(4)]
    wrong = LoadConfig("", "", headers=(("Authorization", "Bearer wrong"),))
    with backend.serve_args(["--api-key", "sekret", *SERVER_ARGS]) as server:
        assert server.run(requests, LoadConfig("", "")) is not None  # the launcher's own key
        assert server.run(requests, wrong) is None
    trial = server.trial
    assert trial.status == "auth", trial.cause
    assert "HTTP 401" in trial.cause and "--api-key" in trial.cause
    assert all(r.error is None for r in trial.runs[0].records)
    assert all(r.error.startswith("HTTP 401") for r in trial.runs[1].records)
    assert "sekret" not in json.dumps(trial.to_dict())
    assert_gone(trial.server_pids)
