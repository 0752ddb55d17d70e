"""`sweetspot tune --backend vllm` on the CPU build: real trials, one of them an OOM, a kill in
the middle of a trial, a resume that loses only that trial, and a pick that beats the
baseline on measured throughput."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweetspot.testing.tiny_model import make_tiny_model
from tests.conftest import trial_processes

pytestmark = pytest.mark.vllm

WORKLOAD = {"name": "tiny", "prompt": {"kind": "fixed", "value": 32},
            "output": {"kind": "fixed", "value": 32}, "arrival": {"process": "inf"}}


def test_tune_on_real_servers_survives_a_kill(vllm_python: Path, tmp_path: Path) -> None:
    # 16 layers x 4 KV heads x 64: 16 KiB per token, so VLLM_CPU_KVCACHE_SPACE=1 holds 65,536
    # tokens: max-model-len 131072 cannot start (oom), 4096 can.
    model = make_tiny_model(tmp_path / "m", layers=16, kv_heads=4, max_position=131_072)
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(WORKLOAD))
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    common = ["--storage", storage, "--study-name", "real", "--report-dir", str(tmp_path / "r")]
    args = [sys.executable, "-m", "sweetspot.cli", "tune", "--backend", "vllm", "--dummy-weights",
            "--model", str(model.model_dir), "--tokenizer", str(model.tokenizer_dir),
            "--gpu", "cpu", "--vllm-version", "0.32.0", "--vllm-python", str(vllm_python),
            "--workload", str(workload), "--num-requests", "32", "--rate", "auto", "--env",
            "VLLM_CPU_KVCACHE_SPACE=1", "--server-args", "--enforce-eager",
            "--baseline", f"vllm serve {model.model_dir} --max-num-seqs 2 --max-model-len 4096",
            "--space", "max_num_seqs=2,32", "--space", "max_model_len=4096,131072",
            "--space", "enable_prefix_caching=", "--space", "speculative=",
            "--space", "max_num_batched_tokens=", "--strategy", "ofat",
            "--trials", "4", "--confirm", "0", "--trials-dir", str(tmp_path / "trials"),
            *common]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Kill it in the middle of its second trial: the second server's log appears, then wait.
    second_log = tmp_path / "trials" / "trial-0002" / "vllm.log"
    deadline = time.monotonic() + 400
    while not second_log.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(1)
    assert second_log.exists(), first.communicate()[1]
    time.sleep(15)
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 143, stderr
    assert not trial_processes(tmp_path / "trials"), "a vLLM process survived"

    resumed = subprocess.run([sys.executable, "-m", "sweetspot.cli", "tune", "--resume",
                              *common], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    data = json.loads((tmp_path / "r" / "trials.json").read_text())
    rows = {r["number"]: r for r in data["trials"]}
    # baseline, max-num-seqs 32, max-model-len 131072 (oom): each start costs ~30 s here, so
    # no third knob; trial 1 was in flight when killed: lost
    assert sorted(rows) == [0, 2, 3]
    # --rate auto: the baseline's capacity and traffic ran on one server (trial-0001), so every
    # trial started one server, the killed one too.
    assert len(list((tmp_path / "trials").glob("trial-*"))) == len(rows) + 1
    assert data["offered_rate"] and all(r["offered_rate"] == data["offered_rate"]
                                         for r in rows.values())
    statuses = [r["status"] for r in rows.values()]
    assert statuses.count("oom") == 1
    oom = next(r for r in rows.values() if r["status"] == "oom")
    assert oom["config"]["max_model_len"] == 131072 and "max seq len" in oom["cause"]
    base = rows[data["baseline"]]
    best = max((r for r in rows.values() if r["status"] == "ok"),
               key=lambda r: r["metrics"]["output_throughput"])
    pick = rows[next(p for p in data["picks"] if p["goal"] == "max-throughput")["trial"]]
    # The pick is the simplest configuration within the measured resolution of the best.
    assert pick["metrics"]["output_throughput"] >= best["metrics"]["output_throughput"] * (
        1 - data["resolution"])
    assert pick["metrics"]["output_throughput"] > base["metrics"]["output_throughput"]
    assert best["config"]["max_num_seqs"] == 32 and pick["config"]["max_num_seqs"] == 32
    assert not trial_processes(tmp_path / "trials")
