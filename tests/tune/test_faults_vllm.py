"""Fault injection: `sweetspot tune --backend vllm` on the CPU build, SIGKILLed at random
moments of real trials — server start-up, the workload, anywhere — ten times over, each time
resumed. After every kill no process of a trial is left (the server's guard takes its group
down; nothing else was running); at the end the study completes on resume, with every trial
counted once and no temporary file left beside the report."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweetspot.testing.tiny_model import make_tiny_model
from tests.conftest import trial_processes

pytestmark = pytest.mark.vllm

KILLS = 10
WORKLOAD = {"name": "tiny", "prompt": {"kind": "fixed", "value": 16},
            "output": {"kind": "fixed", "value": 16}, "arrival": {"process": "inf"}}
STARTED = "Application startup complete"


def test_ten_sigkills_of_real_trials_leave_nothing_behind(vllm_python: Path,
                                                          tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "m", layers=2, kv_heads=2)
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(WORKLOAD))
    trials_dir = tmp_path / "trials"
    common = ["--storage", f"sqlite:///{tmp_path / 'studies.db'}", "--study-name", "faults",
              "--report-dir", str(tmp_path / "report")]
    new = [sys.executable, "-m", "sweetspot.cli", "tune", "--backend", "vllm",
           "--dummy-weights", "--model", str(model.model_dir), "--tokenizer",
           str(model.tokenizer_dir), "--gpu", "cpu", "--vllm-version", "0.32.0",
           "--vllm-python", str(vllm_python), "--workload", str(workload), "--num-requests",
           "16", "--rate", "20", "--env", "VLLM_CPU_KVCACHE_SPACE=1", "--server-args",
           "--enforce-eager", "--fix", "max_model_len=512", "--space", "max_num_seqs=2,4,8",
           "--space", "enable_prefix_caching=", "--space", "max_num_batched_tokens=",
           "--space", "speculative=", "--space", "gpu_memory_utilization=",
           "--strategy", "grid", "--trials", "3", "--confirm", "0",
           "--trials-dir", str(trials_dir), *common]
    resume = [sys.executable, "-m", "sweetspot.cli", "tune", "--resume", *common]
    rng = random.Random(17)
    moments = []
    for i in range(KILLS):
        phase = ("start-up", "workload", "anywhere")[i % 3]
        tuner = subprocess.Popen(new if i == 0 else resume, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        try:
            moments.append(_kill_at(tuner, phase, trials_dir, rng))
        finally:
            if tuner.poll() is None:
                tuner.kill()
            tuner.wait()
        left = _wait_until_no_trial_processes(trials_dir, timeout_s=60)
        assert not left, f"kill {i + 1} ({moments[-1]}) left processes {left}"
    # The kills hit where they were meant to: some while a server started, some in a workload.
    assert sum(m.startswith("start-up") for m in moments) >= 3, moments
    assert sum(m.startswith("workload") for m in moments) >= 3, moments
    done = subprocess.run([*resume, "--trials", "3"], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr + done.stdout
    assert not _wait_until_no_trial_processes(trials_dir, timeout_s=5)
    data = json.loads((tmp_path / "report" / "trials.json").read_text())
    numbers = [r["number"] for r in data["trials"]]
    assert len(numbers) == len(set(numbers)) >= 3
    measured = [r["config"].get("max_num_seqs") for r in data["trials"] if r["status"] == "ok"]
    assert len(measured) >= 3 and len(set(measured)) == len(measured)  # each counted once
    assert not [p for p in tmp_path.rglob("*.tmp")], "a temporary file was left"


def _kill_at(tuner: subprocess.Popen, phase: str, trials_dir: Path, rng: random.Random) -> str:
    """SIGKILL ``tuner`` in ``phase`` of the trial it is running; what was hit."""
    started = time.monotonic()
    before = set(trials_dir.glob("trial-*")) if trials_dir.exists() else set()
    deadline = started + 300
    log = None
    while log is None and time.monotonic() < deadline and tuner.poll() is None:
        fresh = set(trials_dir.glob("trial-*")) - before if trials_dir.exists() else set()
        if fresh:
            log = max(fresh) / "vllm.log"
        else:
            time.sleep(0.1)
    assert log is not None, f"no trial started: {tuner.stderr.read() if tuner.poll() else ''}"
    if phase == "start-up":
        time.sleep(rng.uniform(0.5, 8.0))
        what = "start-up" if STARTED not in _text(log) else "workload (started early)"
    elif phase == "workload":
        while STARTED not in _text(log) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(rng.uniform(0.0, 2.0))
        what = "workload"
    else:
        time.sleep(rng.uniform(0.0, 30.0))
        what = "anywhere: " + ("workload" if STARTED in _text(log) else "start-up")
    if tuner.poll() is not None:
        return f"{what} (the tuner had ended: {tuner.returncode})"
    tuner.send_signal(signal.SIGKILL)
    return what


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _wait_until_no_trial_processes(trials: Path, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = trial_processes(trials)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
