"""Length quantiles from vLLM's coarse 1-2-5 token-count buckets: the censored lognormal fit
with the exact mean, against the linear interpolation it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from sweetspot.guard.lengths import bucket_counts, fit_lengths
from sweetspot.metrics.prometheus import histogram_quantile
from sweetspot.testing.mock_engine import TOKEN_BUCKETS


def _histogram(values: np.ndarray) -> tuple[list[tuple[float, float]], float, float]:
    """(le, cumulative count) pairs as vLLM exposes them, the sum and the count."""
    bounds = [*TOKEN_BUCKETS, float("inf")]
    cumulative = [(b, float((values <= b).sum())) for b in bounds]
    return cumulative, float(values.sum()), float(len(values))


@pytest.mark.parametrize(("median", "sigma", "low", "high"), [
    (4000, 0.4, 2048, 16000),  # the `long` preset's prompts
    (300, 0.6, 16, 1500),  # its outputs
    (150, 0.8, 8, 4096),  # `chat` prompts
    (3000, 0.35, 1024, 8000),  # `rag` prompts
])
def test_fit_recovers_p50_and_p90_of_lognormal_traffic_within_5_percent(
        median: float, sigma: float, low: int, high: int) -> None:
    rng = np.random.default_rng(7)
    values = np.clip(np.rint(rng.lognormal(np.log(median), sigma, 3000)), low, high)
    cumulative, total, count = _histogram(values)
    fit = fit_lengths(cumulative, total, count)
    assert fit is not None and fit.count == 3000
    for q, fitted in ((50, fit.p50), (90, fit.p90)):
        true = float(np.percentile(values, q))
        assert abs(fitted / true - 1) < 0.05, (q, fitted, true)
    assert fit.mean == pytest.approx(values.mean())


def test_fit_beats_linear_interpolation_inside_a_wide_bucket() -> None:
    """`long` prompts: P90 (~6,700) lies in the 5,000-10,000 bucket, where Prometheus'
    interpolation reads a flat density."""
    rng = np.random.default_rng(3)
    values = np.clip(np.rint(rng.lognormal(np.log(4000), 0.4, 3000)), 2048, 16000)
    cumulative, total, count = _histogram(values)
    true_p90 = float(np.percentile(values, 90))
    fitted = fit_lengths(cumulative, total, count)
    linear = histogram_quantile(0.9, cumulative)
    assert fitted is not None and linear is not None
    assert abs(fitted.p90 / true_p90 - 1) < 0.05
    assert abs(linear / true_p90 - 1) > 2 * abs(fitted.p90 / true_p90 - 1)


def test_fixed_lengths_fit_a_narrow_distribution_at_their_mean() -> None:
    values = np.full(50, 128.0)
    fit = fit_lengths(*_histogram(values))
    assert fit is not None
    assert fit.p50 == pytest.approx(128, rel=0.01) and fit.p90 == pytest.approx(128, rel=0.05)
    assert fit.low == 101 and fit.high == 200  # the one bucket it filled: (100, 200]


def test_no_observations_no_fit() -> None:
    assert fit_lengths([(1.0, 0.0), (float("inf"), 0.0)], 0.0, 0.0) is None
    assert bucket_counts([(2.0, 3.0), (1.0, 1.0), (float("inf"), 3.0)]) == [
        (0.0, 1.0, 1.0), (1.0, 2.0, 2.0), (2.0, float("inf"), 0.0)]
