"""Finalists confirmed: two configurations re-run with repeats, interleaved, and a winner
declared only when the confidence interval of their difference excludes zero.

The runs are paired: within a repeat both finalists get the same requests (one seed), and they
run in turn (A, B, A, B, …), so the workload's draw and the machine's drift fall on both alike.
The statistic is therefore the per-pair log-ratio of their capacities, log(A_i / B_i), with a
Student t interval of its mean (reported as a relative difference, exp(·) - 1): the variation
between repeats that both share cancels, which Welch's unpaired test cannot use. The interval is
at 97.5 %, not 95 %: the verdict moves a recommendation towards a rollout, so a false winner costs
more than a missed one — identical finalists tie 97.5 % of the time, and with 8 pairs a 5 % ± 3 %
gain is still found 95 % of the time (simulated; 4 pairs: about 40 %, so a measured study's
default --confirm 3 finds gains of 10 % or more). A pair
in which either run failed counts its failure: the failed side's capacity is 0, so that pair's
ratio is unbounded and the pair is dropped from the interval but named in the verdict.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.executors.base import WorkerLost
from sweetspot.tune.result import TrialResult

__all__ = ["LEVEL", "Confirmation", "Pairs", "confirm_finalists", "paired_difference_interval",
           "paired_ratio_interval", "repeat_pairs", "welch_interval"]

# Runs ``repeats`` pairs of the configurations, interleaved, on one machine, at the offered
# rate given: each one's capacities (tok/s, 0 for a failed run) by repeat (``repeat_pairs``, or
# an executor's ``pairs``).
Pairs = Callable[[Sequence[ServingConfig], int, float | None], list[list[float]]]

LEVEL = 0.975


@dataclass(frozen=True, slots=True)
class Confirmation:
    numbers: tuple[int, int]  # trial numbers of the first finalist and the second
    samples: tuple[tuple[float, ...], tuple[float, ...]]  # capacity (tok/s) per repeat
    ratio: float  # mean paired ratio first/second - 1 (+0.05: the first serves 5 % more)
    interval: tuple[float, float]  # of ``ratio``
    verdict: str  # "winner" (the first is better) or "tie"
    failed_pairs: int = 0

    @property
    def difference(self) -> float:
        """Mean difference in output tok/s (first minus second)."""
        a, b = self.samples
        return float(np.mean(a) - np.mean(b))

    def text(self) -> str:
        a, b = self.numbers
        low, high = self.interval
        head = (f"trial {a} beats trial {b}" if self.verdict == "winner"
                else f"trials {a} and {b} tie")
        tail = f", {self.failed_pairs} pair(s) failed" if self.failed_pairs else ""
        return (f"{head}: {self.ratio:+.1%} capacity, {LEVEL * 100:g} % interval "
                f"[{low:+.1%}, {high:+.1%}], paired over {len(self.samples[0])} runs each"
                f"{tail}")

    def to_dict(self) -> dict:
        return {"numbers": list(self.numbers), "samples": [list(s) for s in self.samples],
                "ratio": self.ratio, "difference": self.difference,
                "interval": list(self.interval), "verdict": self.verdict,
                "failed_pairs": self.failed_pairs, "paired": True, "text": self.text()}


def paired_ratio_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL
                          ) -> tuple[float, float, float]:
    """(mean ratio - 1, low, high) of a over b from paired samples: scipy's one-sample t
    interval of the per-pair log-ratios; pairs with a non-positive side are left out."""
    logs = np.array([math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0])
    if len(logs) == 0:
        return 0.0, -math.inf, math.inf
    mean = float(logs.mean())
    if len(logs) < 2:
        return math.expm1(mean), -math.inf, math.inf
    if np.ptp(logs) == 0:  # every pair the same ratio: no spread to be unsure of
        return math.expm1(mean), math.expm1(mean), math.expm1(mean)
    ci = stats.ttest_1samp(logs, 0.0).confidence_interval(confidence_level=level)
    return math.expm1(mean), math.expm1(float(ci.low)), math.expm1(float(ci.high))


def paired_difference_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL
                               ) -> tuple[float, float, float]:
    """(mean difference a - b, low, high) from paired samples: scipy's one-sample t interval
    of the per-pair differences. For counts that may be 0 (failed requests, preemptions),
    where a ratio has no meaning."""
    diffs = np.asarray(a, float) - np.asarray(b, float)
    if len(diffs) == 0:
        return 0.0, -math.inf, math.inf
    mean = float(diffs.mean())
    if len(diffs) < 2:
        return mean, -math.inf, math.inf
    if np.ptp(diffs) == 0:  # every pair the same difference: no spread to be unsure of
        return mean, mean, mean
    ci = stats.ttest_1samp(diffs, 0.0).confidence_interval(confidence_level=level)
    return mean, float(ci.low), float(ci.high)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL
                   ) -> tuple[float, float, float]:
    """(difference of means, low, high) by scipy's Welch t: for samples that are not paired."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    diff = float(x.mean() - y.mean())
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return diff, diff, diff
    ci = stats.ttest_ind(x, y, equal_var=False).confidence_interval(confidence_level=level)
    return diff, float(ci.low), float(ci.high)


def verdict_of(a: Sequence[float], b: Sequence[float], numbers: tuple[int, int]
               ) -> Confirmation:
    """The paired verdict, ordered so that a winner comes first."""
    ratio, low, high = paired_ratio_interval(a, b)
    failed = sum(1 for x, y in zip(a, b, strict=True) if x <= 0 or y <= 0)
    verdict = "winner" if low > 0 or high < 0 else "tie"
    if high < 0:  # the second was in fact better: say so in the numbers' order
        r, lo, hi = paired_ratio_interval(b, a)
        return Confirmation(numbers[::-1], (tuple(b), tuple(a)), r, (lo, hi), verdict, failed)
    return Confirmation(numbers, (tuple(a), tuple(b)), ratio, (low, high), verdict, failed)


def confirm_finalists(evaluator: Evaluator,
                      finalists: Sequence[tuple[TrialResult, ServingConfig]],
                      repeats: int, pairs: Pairs | None = None) -> Confirmation | None:
    """``finalists``: two (row, config), the candidate first. Each row's own trial counts as
    its first run (same seed for both: already a pair); ``repeats`` more pairs follow,
    interleaved, each pair on a fresh seed, on one machine: here (``evaluator``), or where
    ``pairs`` runs them (``--executor ray``: one task on one node)."""
    if len(finalists) < 2 or repeats < 1:
        return None
    configs = [config for _, config in finalists[:2]]
    if pairs is None:
        more = repeat_pairs(evaluator, configs, repeats)
    else:
        try:
            more = pairs(configs, repeats, evaluator.rate)
        except WorkerLost as lost:  # twice: the picks stand unconfirmed, as with --confirm 0
            logging.getLogger(__name__).warning("the finalists' confirmation was not run: %s",
                                                lost)
            return None
    samples = [[row.throughput, *runs] for (row, _), runs in zip(finalists[:2], more,
                                                                  strict=True)]
    numbers = (finalists[0][0].number or 0, finalists[1][0].number or 0)
    return verdict_of(samples[0], samples[1], numbers)


def repeat_pairs(evaluator: Evaluator, configs: Sequence[ServingConfig], repeats: int
                 ) -> list[list[float]]:
    """Repeats 1..``repeats`` of each configuration, A B A B …: capacities (0 if failed)."""
    samples: list[list[float]] = [[] for _ in configs]
    for repeat in range(1, repeats + 1):
        for i, config in enumerate(configs):
            row, _ = evaluator.evaluate(config, repeat=repeat)
            samples[i].append(row.throughput if row.status == "ok" else 0.0)
    return samples
