"""compare on the simulator: real differences found, identical configurations left alone, failures
called regressions (issue 20's "done when")."""

from __future__ import annotations

from pathlib import Path

from sweetspot.guard.compare import Comparison
from tests.guard.conftest import GPU, A, B, compare_commands

FAST = dict(model=None, gpu=GPU, num_requests=60)


def _compare(a: str, b: str, workload: Path, **given) -> Comparison:
    return compare_commands(a, b, workload=str(workload), **{**FAST, **given})


def _verdict(comparison: Comparison, key: str) -> str:
    return next(m.verdict for m in comparison.metrics if m.metric.key == key)


def test_the_pair_differs_by_about_ten_percent(fixed_workload):
    exact = _compare(A, B, fixed_workload, speed_spread=0.0, min_repeats=1, max_repeats=1)
    throughput = next(m for m in exact.metrics if m.metric.key == "output_throughput")
    assert 0.08 < throughput.b / throughput.a - 1 < 0.12


def test_a_ten_percent_gain_is_called_better_within_five_repeats(fixed_workload):
    """20 seeds each way: the gain found within five pairs, the loss called a regression, never
    the other way round. (At the default 1.5 % spread 98 % of seeds find it:
    benchmarks/compare_rates.py; each miss is a "no significant difference".)"""
    tolerant = "ttft=50%,tpot=50%"  # the pair's latencies are not what this test is about
    found = [_compare(A, B, fixed_workload, seed=seed, tolerance=tolerant) for seed in range(20)]
    lost = [_compare(B, A, fixed_workload, seed=seed, tolerance=tolerant) for seed in range(20)]
    assert all(len(c.runs) <= 5 for c in found + lost)
    assert any(len(c.runs) < 5 for c in found)  # decided early where the pairs agree
    gains = [_verdict(c, "output_throughput") for c in found]
    losses = [_verdict(c, "output_throughput") for c in lost]
    assert gains.count("better") >= 18 and "worse" not in gains, gains
    assert losses.count("worse") >= 18 and "better" not in losses, losses
    assert [c.verdict for c in found].count("better") >= 18
    assert all(c.verdict == "worse" for c, v in zip(lost, losses, strict=True) if v == "worse")


def test_identical_configurations_show_no_significant_difference(fixed_workload):
    """40 seeded repetitions of A against itself, each server with its own drawn speed: the
    issue asks for "no significant difference" in 95 % of them."""
    verdicts = [_compare(A, A, fixed_workload, seed=seed).verdict for seed in range(40)]
    same = verdicts.count("no significant difference")
    assert same >= 38, verdicts
    assert set(verdicts) <= {"no significant difference", "better", "worse"}


def test_the_servers_of_a_pair_differ_only_with_a_spread(fixed_workload):
    drawn = _compare(A, A, fixed_workload, min_repeats=2, max_repeats=2)
    throughput = [p[0].values["output_throughput"] / p[1].values["output_throughput"]
                  for p in drawn.runs]
    assert all(ratio != 1.0 for ratio in throughput)
    exact = _compare(A, A, fixed_workload, speed_spread=0.0, min_repeats=2, max_repeats=2)
    assert all(m.change == 0 for m in exact.metrics if m.change is not None)
    assert exact.verdict == "no significant difference"


def test_a_b_that_cannot_start_is_a_regression_with_its_cause(fixed_workload):
    oom = _compare(A, f"{A} --max-model-len 32768 --gpu-memory-utilization 0.2",
                   fixed_workload)
    assert oom.verdict == "worse"
    assert oom.failure is not None and oom.failure.startswith("B failed (oom)")
    assert oom.regressions[0] == oom.failure
    assert len(oom.runs) == 1  # no point in repeating a server that cannot start
