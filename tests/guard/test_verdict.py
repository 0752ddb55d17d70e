"""The statistics of compare: intervals, verdicts, tolerances, the looks' error budget."""

from __future__ import annotations

import numpy as np
import pytest

from sweetspot._errors import SweetspotError
from sweetspot.guard.metrics import DEFAULT_GUARDED, guarded_metrics, metric_for, parse_tolerances
from sweetspot.guard.requests import PerRequest
from sweetspot.guard.verdict import ALPHA, judge_repeats, judge_requests, look_levels
from sweetspot.metrics.slo import parse_slos

THROUGHPUT = metric_for("output_throughput")
P99_TTFT = metric_for("p99_ttft_ms")
FAILED = metric_for("failed")


def test_the_looks_spend_alpha_once_and_most_of_it_last():
    levels = look_levels(3, 5)
    assert list(levels) == [3, 4, 5]
    shares = [1 - levels[n] for n in (3, 4, 5)]
    assert sum(shares) == pytest.approx(ALPHA)
    assert shares[0] < shares[1] < shares[2]
    assert look_levels(1, 1) == {1: pytest.approx(1 - ALPHA)}


def test_a_clear_throughput_gain_is_better_and_decided():
    a = [1000, 1100, 950, 1020, 980]
    b = [x * g for x, g in zip(a, (1.10, 1.12, 1.09, 1.11, 1.10), strict=True)]
    v = judge_repeats(THROUGHPUT, a, b, level=0.95, guarded=True)
    assert v.verdict == "better" and v.decided and not v.regression
    assert 0.09 < v.change < 0.12 and v.low > 0
    assert v.method == "paired t over 5 runs each"


def test_lower_latency_is_better_and_higher_is_a_regression():
    a = [100.0, 120.0, 90.0, 110.0]
    faster = judge_repeats(P99_TTFT, a, [x * 0.8 for x in a[:2]] + [x * 0.82 for x in a[2:]],
                           level=0.95, guarded=True)
    assert faster.verdict == "better"
    slower = judge_repeats(P99_TTFT, a, [x * 1.3 for x in a[:2]] + [x * 1.32 for x in a[2:]],
                           level=0.95, guarded=True)
    assert slower.verdict == "worse" and slower.regression
    unguarded = judge_repeats(P99_TTFT, a, [x * 1.3 for x in a[:2]] + [x * 1.32 for x in a[2:]],
                              level=0.95)
    assert unguarded.verdict == "worse" and not unguarded.regression


def test_worse_within_the_tolerance_is_no_regression():
    a = [100.0, 120.0, 90.0, 110.0]
    b = [x * f for x, f in zip(a, (1.03, 1.04, 1.03, 1.035), strict=True)]
    strict = judge_repeats(P99_TTFT, a, b, level=0.95, guarded=True)
    assert strict.verdict == "worse" and strict.regression
    tolerant = judge_repeats(P99_TTFT, a, b, level=0.95, guarded=True, tolerance=0.10)
    assert tolerant.verdict == "within tolerance" and tolerant.decided
    assert not tolerant.regression


def test_noise_alone_is_no_significant_difference_and_undecided():
    rng = np.random.default_rng(1)
    a = list(1000 * np.exp(rng.normal(0, 0.03, 5)))
    b = list(1000 * np.exp(rng.normal(0, 0.03, 5)))
    v = judge_repeats(THROUGHPUT, a, b, level=0.95, guarded=True)
    assert v.verdict == "no significant difference" and not v.decided
    assert v.low < 0 < v.high


def test_one_pair_has_no_interval_and_identical_values_are_exact():
    one = judge_repeats(THROUGHPUT, [1000.0], [1100.0], level=0.95)
    assert one.low is None and one.verdict == "no significant difference" and not one.decided
    same = judge_repeats(metric_for("peak_memory_bytes"), [2.0**33] * 3, [2.0**33] * 3,
                         level=0.95)
    assert same.change == 0 and same.verdict == "no significant difference" and same.decided
    assert same.a == pytest.approx(8.0)  # reported in GiB


def test_counts_are_compared_as_differences():
    none = judge_repeats(FAILED, [0, 0, 0], [0, 0, 0], level=0.95, guarded=True)
    assert none.verdict == "no significant difference" and none.change == 0
    failing = judge_repeats(FAILED, [0, 0, 0], [4, 5, 6], level=0.95, guarded=True)
    assert failing.verdict == "worse" and failing.regression and failing.change == 5
    allowed = judge_repeats(FAILED, [0, 0, 0], [1, 1, 1], level=0.95, guarded=True,
                            tolerance=2)
    assert not allowed.regression


def _requests(ttft_s: np.ndarray, failed: np.ndarray | None = None) -> PerRequest:
    n = len(ttft_s)
    failed = np.zeros(n, bool) if failed is None else failed
    itl = np.tile(ttft_s / 10, 3)
    return PerRequest(ttft_s=np.where(failed, np.nan, ttft_s), tpot_s=ttft_s / 10,
                      e2el_s=ttft_s * 2, itl_s=itl, itl_owner=np.tile(np.arange(n), 3),
                      failed=failed)


def test_within_one_run_the_bootstrap_pairs_the_requests():
    rng = np.random.default_rng(0)
    base = rng.lognormal(np.log(0.1), 0.8, 300)  # requests differ far more than A and B
    a = _requests(base * np.exp(rng.normal(0, 0.02, 300)))
    b = _requests(base * 1.10 * np.exp(rng.normal(0, 0.02, 300)))
    median = metric_for("median_ttft_ms")
    worse = judge_requests(median, a, b, level=0.95, guarded=True)
    assert worse is not None and worse.verdict == "worse" and worse.regression
    assert 0.07 < worse.change < 0.13
    assert worse.method == "paired bootstrap over 300 requests"
    same = judge_requests(median, a, a, level=0.95, guarded=True)
    assert same is not None and same.change == 0 and same.verdict == "no significant difference"
    itl = judge_requests(metric_for("p99_itl_ms"), a, b, level=0.95)
    assert itl is not None and itl.verdict == "worse"
    assert judge_requests(THROUGHPUT, a, b, level=0.95) is None  # one run tells no throughput


def test_failed_requests_within_one_run():
    base = np.full(200, 0.1)
    failed = np.zeros(200, bool)
    failed[::10] = True
    v = judge_requests(FAILED, _requests(base), _requests(base, failed), level=0.95,
                       guarded=True)
    assert v is not None and v.verdict == "worse" and v.change == 20


def test_tolerances_parse_and_name_guarded_metrics():
    tol = parse_tolerances("tpot=5%,throughput=3% errors=2,p50_ttft=10%")
    assert tol == {"p99_tpot_ms": 0.05, "output_throughput": 0.03, "failed": 2.0,
                   "median_ttft_ms": 0.10}
    assert guarded_metrics(parse_slos(None), {}) == DEFAULT_GUARDED
    guarded = guarded_metrics(parse_slos("ttft=300ms,p90_e2el=2s"), {"p99_tpot_ms": 0.05})
    assert guarded == ("output_throughput", "request_goodput", "p99_ttft_ms", "p99_tpot_ms",
                       "failed", "p90_e2el_ms")


@pytest.mark.parametrize("text", ["tpot", "tpot=5", "speed=5%", "tpot=-1%", "tpot=x%",
                                  "tpot=5%,tpot=6%"])
def test_bad_tolerances_are_one_clear_error(text):
    with pytest.raises(SweetspotError, match="--tolerance"):
        parse_tolerances(text)
