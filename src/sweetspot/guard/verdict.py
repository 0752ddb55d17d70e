"""Is B better than A, and is the difference real: one metric's interval and verdict.

Every interval is of B against A on paired data. A pair is one repeat: both sides got the same
requests (one seed) and ran in turn on the same machine, so the workload's draw and the
machine's drift fall on both alike and cancel in the pair.

- **Over repeats** (two pairs or more): ``tune.confirm``'s statistic — the Student t interval
  of the mean per-pair log-ratio log(B_i / A_i), reported as a relative change exp(·) - 1 — for
  positive quantities (throughputs, latencies, memory); the t interval of the mean per-pair
  difference B_i - A_i for counts that may be 0 (failed requests, preemptions).
- **Within one run** (one pair, or two saved results with per-request data): a paired bootstrap
  over requests (``scipy.stats.bootstrap`` over request indices, one draw applied to both sides,
  percentile interval): for latency statistics, the log-ratio of B's to A's; for failed
  requests, the difference of counts. It covers the draw of requests, not the variation between
  fresh servers that only repeats show, so a throughput of one run gets no interval.
- **Verdict**, direction-aware (lower latency is better) with the metric's tolerance τ (a share
  for ratios, a count for counts; 0 unless ``--tolerance`` says): *better* when the interval
  lies wholly on B's good side; *worse* when it lies wholly beyond τ on the bad side — a
  regression where the metric is guarded; *within tolerance* when B is worse but not shown to
  be beyond τ; else *no significant difference*. A metric is *decided* when more repeats could
  not move it across the regression line: better, worse, or an interval that stays within τ.
- **Repeated looks, several metrics.** ``compare`` looks after every pair from
  ``--min-repeats`` to ``--max-repeats`` and stops once every guarded metric is decided. Each
  look would add its own chance of a false verdict, so the error α (5 %) is spent over the
  looks: the power spending function α·(j/K)^ρ (Kim and DeMets' family, ρ = 2) gives look j of
  K the share α·((j/K)² - ((j-1)/K)²) — little to the early looks, which stop only on clear
  differences, most to the last. The gate fails when any guarded metric is worse, so each
  look's share is split evenly among the m guarded metrics (Bonferroni): a guarded interval is
  at 1 - share/m, a metric only reported at 1 - share. By the union bound the chance of a false
  better or worse on any guarded metric is then at most α, where each t interval holds its
  level. Measured on the simulator (``benchmarks/compare_rates.py``, 200 seeds of two identical
  commands at the default 1.5 % speed spread, four guarded metrics): 95.5 % "no significant
  difference"; the false calls came from P99 TTFT (2.5 %) and P99 TPOT (2 %) more often than
  from throughput (1 %): the P99 of 60 requests is a heavy-tailed statistic whose per-pair
  log-ratios the t interval treats as normal. A 10 % capacity gain was called better within
  five pairs in 98 % of the seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from sweetspot.guard.metrics import Metric
from sweetspot.guard.requests import PerRequest
from sweetspot.tune.confirm import paired_difference_interval, paired_ratio_interval

__all__ = ["ALPHA", "BOOTSTRAP_RESAMPLES", "MetricVerdict", "judge_repeats", "judge_requests",
           "look_levels"]

ALPHA = 0.05
SPENDING_POWER = 2  # ρ of the spending function α·t^ρ
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True, slots=True)
class MetricVerdict:
    """One metric of B against A."""

    metric: Metric
    a: float | None  # A's mean over its runs, in the metric's unit (None: not measured)
    b: float | None
    change: float | None  # B against A: a share (+0.05: 5 % more) or, for counts, B - A
    low: float | None  # the interval of ``change``; None where there is none
    high: float | None
    verdict: str  # better, worse, within tolerance, no significant difference, not measured
    decided: bool  # more repeats could not move it across the regression line
    guarded: bool
    tolerance: float  # how much worse B may be (a share, or a count)
    method: str  # how the interval was made, for people
    level: float  # the interval's confidence level

    @property
    def regression(self) -> bool:
        return self.guarded and self.verdict == "worse"

    def to_dict(self) -> dict[str, Any]:
        m = self.metric
        return {"key": m.key, "label": m.label, "unit": m.unit,
                "higher_is_better": m.higher_is_better, "relative": m.relative,
                "a": self.a, "b": self.b, "change": self.change,
                "interval": None if self.low is None else [self.low, self.high],
                "level": self.level, "verdict": self.verdict, "decided": self.decided,
                "guarded": self.guarded, "tolerance": self.tolerance,
                "regression": self.regression, "method": self.method}


def look_levels(min_repeats: int, max_repeats: int, alpha: float = ALPHA) -> dict[int, float]:
    """Pairs run -> the confidence level of the look after them (see the module docstring)."""
    looks = list(range(min_repeats, max_repeats + 1))
    k = len(looks)
    rho = SPENDING_POWER
    return {n: 1 - alpha * ((j / k) ** rho - ((j - 1) / k) ** rho)
            for j, n in enumerate(looks, start=1)}


def _classify(metric: Metric, low: float, high: float, tolerance: float) -> tuple[str, bool]:
    """(verdict, decided) of an interval of B's change (see the module docstring)."""
    good_low, good_high = (low, high) if metric.higher_is_better else (-high, -low)
    if good_low > 0:
        return "better", True
    if good_high < -tolerance:
        return "worse", True
    if good_high < 0:
        return "within tolerance", good_low >= -tolerance
    return "no significant difference", good_low >= -tolerance


def _mean(values: Sequence[float], scale: float) -> float | None:
    return float(np.mean(values)) * scale if len(values) else None


def judge_repeats(metric: Metric, a: Sequence[float | None], b: Sequence[float | None], *,
                  level: float, tolerance: float = 0.0, guarded: bool = False
                  ) -> MetricVerdict:
    """``metric`` over paired repeats (``a[i]`` and ``b[i]`` ran together); pairs where either
    side lacks the value are left out."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    base = dict(metric=metric, a=_mean(xs, metric.scale), b=_mean(ys, metric.scale),
                guarded=guarded, tolerance=tolerance, level=level)
    if not pairs:
        return MetricVerdict(change=None, low=None, high=None, verdict="not measured",
                             decided=True, method="not measured", **base)
    interval = paired_ratio_interval if metric.relative else paired_difference_interval
    change, low, high = interval(ys, xs, level)
    if not (math.isfinite(low) and math.isfinite(high)):
        return MetricVerdict(change=change, low=None, high=None,
                             verdict="no significant difference", decided=False,
                             method=f"{len(pairs)} run(s) each: no interval",
                             **base)
    verdict, decided = _classify(metric, low, high, tolerance)
    return MetricVerdict(change=change, low=low, high=high, verdict=verdict, decided=decided,
                         method=f"paired t over {len(pairs)} runs each",
                         **base)


def _statistic(key: str):
    """The function of an array that gives a bench key's statistic (NaNs ignored)."""
    stat = key.removesuffix("_ms").split("_")[0]
    if stat == "mean":
        return np.nanmean
    if stat == "median":
        return np.nanmedian
    q = float(stat[1:])
    return lambda x: np.nanpercentile(x, q)


def judge_requests(metric: Metric, a: PerRequest, b: PerRequest, *, level: float,
                   tolerance: float = 0.0, guarded: bool = False, seed: int = 0
                   ) -> MetricVerdict | None:
    """``metric`` within one run each, by a paired bootstrap over requests; None for a metric
    requests cannot tell (throughputs, memory)."""
    if len(a) != len(b) or len(a) < 2:
        return None
    if metric.key == "failed":
        def stat(idx: np.ndarray) -> float:
            return float(b.failed[idx].sum() - a.failed[idx].sum())
        values = (float(a.failed.sum()), float(b.failed.sum()))
    elif metric.unit == "ms":
        name, summary = metric.key.removesuffix("_ms").split("_")[1], _statistic(metric.key)

        def stat(idx: np.ndarray) -> float:
            return float(np.log(summary(b.values(name, idx)) / summary(a.values(name, idx))))
        every = np.arange(len(a))
        values = (float(summary(a.values(name, every))) * 1e3,
                  float(summary(b.values(name, every))) * 1e3)
    else:
        return None
    if not all(math.isfinite(v) for v in values):
        return None
    every = np.arange(len(a))
    point = stat(every)
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        ci = stats.bootstrap((every,), stat, vectorized=False, n_resamples=BOOTSTRAP_RESAMPLES,
                             confidence_level=level, method="percentile", random_state=rng,
                             ).confidence_interval
    low, high = float(ci.low), float(ci.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # no spread in any resample
        low = high = point
    if metric.relative:
        point, low, high = math.expm1(point), math.expm1(low), math.expm1(high)
    verdict, decided = _classify(metric, low, high, tolerance)
    return MetricVerdict(metric, values[0], values[1], point, low, high, verdict, decided,
                         guarded, tolerance, f"paired bootstrap over {len(a)} requests", level)
