"""Request lengths from vLLM's token-count histograms (``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``).

Their buckets are a 1-2-5 series (…, 500, 1000, 2000, 5000, …): interpolating linearly inside
a bucket, as ``histogram_quantile`` does, puts a P90 anywhere in 1000-2000 and reads a lognormal
tail as flat. Instead a lognormal is fitted to the bucket counts by interval-censored maximum
likelihood — each observation is only known to lie in its bucket ``(lower, upper]``, so it adds
``log(F(upper) - F(lower))`` — with its mean held to the histogram's exact mean (``_sum /
_count``), which fixes ``mu`` for each ``sigma`` and leaves one parameter for a bounded 1-D
search. The lognormal is clipped to the occupied buckets' range, as a workload spec's ``min``
and ``max`` clip it: traffic with a floor, such as prompts of at least 2,048 tokens, has no
lower tail, and an unclipped fit narrows itself to avoid one (P90 7 % low on ``long``
prompts). Measured on 3,000 draws of each preset's lengths: P50 and P90 within 1.5 %, where
interpolating inside the buckets was off by up to 27 %. Lengths far from a lognormal fit
worse: uniform 32-480 reads P50 -14 %, P90 +15 %; a two-peaked histogram piles its mass on the
two clips.
Quantiles are then the fitted distribution's. Token counts are integers ≥ 1, so the lowest
bucket starts at 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["LengthFit", "bucket_counts", "fit_lengths"]

_UNIT = NormalDist()
SIGMA_BOUNDS = (0.01, 4.0)  # 0.01: all in one bucket (nearly fixed lengths); 4: beyond any trace


@dataclass(frozen=True, slots=True)
class LengthFit:
    """A lognormal fitted to one histogram's observations, and the bucket range they filled."""

    median: float  # tokens
    sigma: float  # of the underlying normal
    mean: float  # tokens, exact (the histogram's sum over its count)
    count: int  # observations
    low: int  # the lowest occupied bucket's lower edge + 1: no observation was shorter
    high: int | None  # the highest occupied bucket's upper edge (None: the +Inf bucket)

    def quantile(self, q: float) -> float:
        value = self.median * math.exp(self.sigma * _UNIT.inv_cdf(q))
        return min(max(value, self.low), self.high if self.high is not None else value)

    @property
    def p50(self) -> float:
        return self.quantile(0.5)

    @property
    def p90(self) -> float:
        return self.quantile(0.9)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)


def bucket_counts(cumulative: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """``(lower, upper, count)`` per bucket from ``(le, cumulative count)`` pairs."""
    out, lower, below = [], 0.0, 0.0
    for upper, total in sorted(cumulative):
        out.append((lower, upper, max(0.0, total - below)))
        lower, below = upper, max(below, total)
    return out


class _ClippedLogNormal:
    """A lognormal clipped to ``[low, high]``, as a workload spec's ``min`` and ``max`` clip
    it: its CDF between the clips, and its mean."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    @staticmethod
    def _z(x: float, mu: float, sigma: float) -> float:
        if x <= 0:
            return -math.inf
        return math.inf if math.isinf(x) else (math.log(x) - mu) / sigma

    @staticmethod
    def _phi(z: float) -> float:
        return 0.0 if z == -math.inf else 1.0 if z == math.inf else _UNIT.cdf(z)

    def cdf(self, x: float, mu: float, sigma: float) -> float:
        return self._phi(self._z(x, mu, sigma))

    def mean(self, mu: float, sigma: float) -> float:
        """``low P(X<low) + E[X; low<X<high] + high P(X>high)``."""
        z_low, z_high = self._z(self.low, mu, sigma), self._z(self.high, mu, sigma)
        inside = math.exp(mu + sigma * sigma / 2) * (
            self._phi(z_high - sigma) - self._phi(z_low - sigma))
        above = 0.0 if math.isinf(self.high) else self.high * (1 - self._phi(z_high))
        return self.low * self._phi(z_low) + inside + above

    def mu_for_mean(self, mean: float, sigma: float) -> float:
        """The location whose clipped mean is ``mean`` (it rises with ``mu``: bisection)."""
        lo, hi = math.log(mean) - 10 - 10 * sigma * sigma, math.log(mean) + 10
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.mean(mid, sigma) < mean else (lo, mid)
        return (lo + hi) / 2


def _log_likelihood(sigma: float, mean: float, model: _ClippedLogNormal,
                    buckets: Sequence[tuple[float, float, float]]) -> float:
    """Of the occupied ``buckets`` (ascending) under the clipped lognormal of that ``sigma``
    and ``mean``: the clips put the mass below the lowest bucket into it, and the mass above
    the highest into that."""
    mu = model.mu_for_mean(mean, sigma)
    total = 0.0
    for index, (lower, upper, count) in enumerate(buckets):
        below = 0.0 if index == 0 else model.cdf(lower, mu, sigma)
        up_to = 1.0 if index == len(buckets) - 1 else model.cdf(upper, mu, sigma)
        total += count * math.log(max(up_to - below, 1e-300))
    return total


def _maximise(f: Callable[[float], float], low: float, high: float, tol: float = 1e-4
              ) -> float:
    """Golden-section search for the maximum of a unimodal ``f`` on ``[low, high]``."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_lengths(cumulative: Sequence[tuple[float, float]], total: float,
                count: float) -> LengthFit | None:
    """The lognormal of the observations counted in ``cumulative`` (``(le, count)`` pairs, as a
    window's bucket deltas), whose values sum to ``total``; None without observations. It is
    clipped to the occupied buckets' range, as the spec written from it clips there."""
    buckets = [b for b in bucket_counts(cumulative) if b[2] > 0]
    if count < 1 or total <= 0 or not buckets:
        return None
    mean = total / count
    model = _ClippedLogNormal(buckets[0][0], buckets[-1][1])
    if len(buckets) == 1:  # every length in one bucket: as narrow as the fit allows
        sigma = SIGMA_BOUNDS[0]
    else:  # on a log scale: narrow traffic gets the resolution wide traffic gets
        sigma = math.exp(_maximise(
            lambda s: _log_likelihood(math.exp(s), mean, model, buckets),
            math.log(SIGMA_BOUNDS[0]), math.log(SIGMA_BOUNDS[1])))
    high = buckets[-1][1]
    return LengthFit(median=math.exp(model.mu_for_mean(mean, sigma)), sigma=sigma, mean=mean,
                     count=round(count), low=max(1, math.floor(buckets[0][0]) + 1),
                     high=None if math.isinf(high) else math.floor(high))
