"""A multiset of measured values and numpy's statistics of it, without writing it out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """A multiset of values: ``values[i]`` counted ``counts[i]`` times (None: once each). The
    simulator's runs share token times between requests (``StepTimes``): their 18 million
    inter-token latencies are a few thousand distinct step gaps, each with a count.

    Statistics as numpy computes them over the values written out: the median and the linear
    percentiles are the same order statistics with numpy's own interpolation (``_lerp``),
    bit for bit; the mean and standard deviation of a counted sample are the weighted sums
    (equal to numpy's pairwise sums to rounding). The order statistics of a sample without
    counts are found by partitioning its values in place, as numpy's ``overwrite_input``."""

    values: np.ndarray
    counts: np.ndarray | None = None

    @property
    def size(self) -> int:
        return self.values.size if self.counts is None else int(self.counts.sum())

    def mean_std(self) -> tuple[float, float]:
        if self.counts is None:
            return float(np.mean(self.values)), float(np.std(self.values))
        n = self.size
        mean = float(np.dot(self.values, self.counts.astype(np.float64))) / n
        dev = self.values - mean
        return mean, math.sqrt(float(np.dot(dev * dev, self.counts.astype(np.float64))) / n)

    def _at(self, ranks: Sequence[int]) -> np.ndarray:
        """The values of rank ``ranks`` (0-based) in the sorted sample."""
        if self.counts is None:
            self.values.partition(sorted(set(ranks)))  # numpy's own selection, in place
            return self.values[list(ranks)]
        order = np.argsort(self.values, kind="stable")
        ends = np.cumsum(self.counts[order])  # rank of each sorted value's last copy, + 1
        return self.values[order[np.searchsorted(ends, ranks, side="right")]]

    def median(self) -> float:
        n = self.size
        if n % 2:
            return float(self._at([n // 2])[0])
        low, high = self._at([n // 2 - 1, n // 2])
        return float((low + high) / 2)

    def quantiles(self, percentiles: Sequence[float]) -> np.ndarray:
        """``np.percentile(values, percentiles)`` (method linear) of the written-out sample."""
        n = self.size
        virtual = (n - 1) * np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
        below = np.floor(virtual)
        below[virtual >= n - 1] = n - 1  # numpy takes the last value (and a gamma of no effect)
        low_rank = below.astype(np.intp)
        high_rank = np.minimum(low_rank + 1, n - 1)
        found = self._at([*low_rank.tolist(), *high_rank.tolist()])
        low, high = found[:low_rank.size], found[low_rank.size:]
        gamma = virtual - below
        diff = high - low
        out: np.ndarray = low + diff * gamma
        late = gamma >= 0.5
        out[late] = (high - diff * (1 - gamma))[late]
        return out
