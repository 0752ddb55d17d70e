"""The roofline simulator against every published measurement of public-cases.md (P1-P8).

Bounds from the issue: median absolute error <= 20 % on throughputs and <= 30 % on latencies,
no case off by more than 2x.
"""

from __future__ import annotations

import statistics

import pytest

from sweetspot.testing.public_cases import CASES, Outcome, run_case


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return [o for case in CASES for o in run_case(case)]


def test_every_public_case_is_encoded() -> None:
    assert [c.case_id for c in CASES] == [f"P{i}" for i in range(1, 9)]


@pytest.mark.parametrize(("kind", "bound"), [("throughput", 0.20), ("latency", 0.30)])
def test_median_absolute_error(outcomes: list[Outcome], kind: str, bound: float) -> None:
    errors = [abs(o.error) for o in outcomes if o.kind == kind]
    assert len(errors) >= 10
    assert statistics.median(errors) <= bound, sorted(errors)


def test_no_case_off_by_more_than_2x(outcomes: list[Outcome]) -> None:
    off = {(o.case_id, o.run, o.metric): round(o.factor, 2) for o in outcomes if o.factor > 2}
    assert not off, off
