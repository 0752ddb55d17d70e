"""The guard tests' fixtures: compare's options as the command line would give them, and
Debian's prometheus binaries (tests/prometheus_install.py)."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweetspot.guard.compare import Comparison
from tests.prometheus_install import prometheus_binary, promtool

__all__ = ["compare_commands", "compare_options", "fixed_workload", "prometheus_binary",
           "promtool"]

MODEL = "qwen2.5-7b"
GPU = "a100-80gb"
# A pair whose simulated capacities differ by about 10 % (tests/guard/test_compare.py measures it
# at --speed-spread 0).
A = f"vllm serve {MODEL} --max-num-seqs 16"
B = f"vllm serve {MODEL} --max-num-seqs 18"


def compare_options(**given) -> SimpleNamespace:
    """Every option of ``sweetspot compare`` at its default, with ``given`` on top."""
    from sweetspot.cli.compare import compare

    defaults = {name: p.default for name, p in inspect.signature(compare).parameters.items()}
    unknown = set(given) - set(defaults)
    assert not unknown, unknown
    return SimpleNamespace(**{**defaults, **given})


def compare_commands(a: str, b: str, **given) -> Comparison:
    """``sweetspot compare A B`` through the library (no subprocess): its sides, its plan, its
    pairs."""
    from sweetspot.cli._compare_settings import command_sides, plan_of
    from sweetspot.guard.compare import run_compare

    options = compare_options(a=a, b=b, **given)
    plan = plan_of(options)
    side_a, side_b, notes = command_sides(options)
    return run_compare(side_a, side_b, plan, source=options.backend, notes=notes)


@pytest.fixture
def fixed_workload(tmp_path: Path) -> Path:
    """Fixed lengths (no draw floor: short capacity runs) at a rate the pairs below keep up
    with."""
    path = tmp_path / "fixed.yaml"
    path.write_text("prompt: {kind: fixed, value: 64}\noutput: {kind: fixed, value: 32}\n"
                    "arrival: {process: poisson, rate: 25}\n")
    return path
