"""Secrets are used, never written (``sweetspot._secrets``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sweetspot._errors import SweetspotError
from sweetspot._secrets import (
    redact_args,
    redact_env,
    redact_url,
    restore_args,
    restore_env,
)

MOCK = (f"{shlex.quote(sys.executable)} -m sweetspot.cli mock-server --host {{host}} "
        "--port {port} --model-name {model} --ttft-ms 2 --itl-ms 1")


def test_what_is_masked() -> None:
    assert redact_args(["--api-key", "k1", "--hf-token=k2", "--ssl-keyfile", "/p", "--x", "1"]
                       ) == ["--api-key", "***", "--hf-token=***", "--ssl-keyfile", "/p",
                             "--x", "1"]
    assert redact_env({"HF_TOKEN": "t", "VLLM_API_KEY": "k", "MY_SECRET": "s",
                       "DB_PASSWORD": "p", "VLLM_CPU_KVCACHE_SPACE": "2"}) == {
        "HF_TOKEN": "***", "VLLM_API_KEY": "***", "MY_SECRET": "***", "DB_PASSWORD": "***",
        "VLLM_CPU_KVCACHE_SPACE": "2"}
    assert redact_url("postgresql://me:pw@db:5432/s") == "postgresql://me:***@db:5432/s"
    assert redact_url("sqlite:///a@b.db") == "sqlite:///a@b.db"


def test_masked_values_come_back_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "back")
    monkeypatch.setenv("VLLM_API_KEY", "key")
    assert restore_env({"HF_TOKEN": "***", "A": "1"}) == {"HF_TOKEN": "back", "A": "1"}
    assert restore_args(["--api-key", "***", "--api-key=***"]) == [
        "--api-key", "key", "--api-key=key"]
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(SweetspotError, match="HF_TOKEN"):
        restore_env({"HF_TOKEN": "***"})


def _tune(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweetspot.cli", "tune", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_study_with_planted_secrets_writes_none_of_them(tmp_path: Path) -> None:
    """--env values, a server option's key and a storage password reach no file under the
    study's folders, its database, nor any output; a resumed study takes them again from
    the environment, and says which one is missing."""
    planted = ("planted-token-1", "planted-key-2", "planted-password-3")
    db = tmp_path / "s.db"
    common = ["--storage", f"sqlite:///{db}", "--study-name", "sec",
              "--report-dir", str(tmp_path / "report")]
    first = _tune("--backend", "vllm", "--model", "qwen2.5-0.5b", "--gpu", "cpu",
                  "--vllm-version", "0.32.0", "--launch-template", MOCK,
                  "--env", f"HF_TOKEN={planted[0]}", "--env", "SWEETSPOT_TEST_SECRET",
                  "--server-args", f"--api-key {planted[1]}", "--workload", "short",
                  "--num-requests", "16", "--rate", "20", "--trials", "2", "--confirm", "0",
                  "--space", "max_num_seqs=2,4", "--space", "enable_prefix_caching=",
                  "--space", "max_num_batched_tokens=", "--space", "speculative=",
                  "--space", "gpu_memory_utilization=", "--space", "max_model_len=",
                  "--trials-dir", str(tmp_path / "trials"), *common,
                  env={"SWEETSPOT_TEST_SECRET": planted[1]})
    assert first.returncode == 0, first.stderr + first.stdout
    bad_storage = _tune("--storage", f"postgresql://me:{planted[2]}@127.0.0.1:1/db")
    assert bad_storage.returncode == 2 and "me:***@" in bad_storage.stderr
    missing = _tune("--resume", *common)
    assert missing.returncode == 2 and "HF_TOKEN" in missing.stderr
    resumed = _tune("--resume", "--trials", "3", *common,
                    env={"HF_TOKEN": planted[0], "SWEETSPOT_TEST_SECRET": planted[1],
                         "VLLM_API_KEY": planted[1]})
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    outputs = [p.stdout + p.stderr for p in (first, bad_storage, missing, resumed)]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert db in files and any(p.name == "trials.json" for p in files)
    for secret in planted:
        assert not any(secret in out for out in outputs), secret
        for path in files:
            assert secret.encode() not in path.read_bytes(), (secret, path)


def test_a_command_line_loses_only_its_secret_values() -> None:
    from sweetspot._secrets import redact_command

    assert redact_command("vllm serve m --api-key sk-1 --max-num-seqs 8") == \
        "vllm serve m --api-key '***' --max-num-seqs 8"
    plain = "vllm serve m  --max-num-seqs 8"  # untouched, spacing and all
    assert redact_command(plain) == plain
    assert redact_command('vllm serve "unclosed') == 'vllm serve "unclosed'
