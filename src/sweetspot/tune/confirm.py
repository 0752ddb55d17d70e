"""Finalists confirmed: the best configurations re-run with repeats, interleaved, and a winner
declared only when the confidence interval of the difference excludes zero.

Each repeat draws fresh requests from the workload (another seed), and the finalists run in
turn within a repeat (A, B, A, B, …), so drift of the machine over time falls on both. The
interval is Welch's t interval of the difference of mean throughputs at 95 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.picks import THROUGHPUT

__all__ = ["Confirmation", "confirm_finalists"]

LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Confirmation:
    numbers: tuple[int, int]  # trial numbers of the winner candidate and the runner-up
    samples: tuple[tuple[float, ...], tuple[float, ...]]  # throughput per repeat
    difference: float  # mean of the first minus mean of the second
    interval: tuple[float, float]
    verdict: str  # "winner" or "tie"

    def text(self) -> str:
        a, b = self.numbers
        low, high = self.interval
        head = (f"trial {a} beats trial {b}" if self.verdict == "winner"
                else f"trials {a} and {b} tie")
        return (f"{head}: {self.difference:+,.0f} output tok/s, {LEVEL:.0%} interval "
                f"[{low:+,.0f}, {high:+,.0f}] over {len(self.samples[0])} runs each")

    def to_dict(self) -> dict:
        return {"numbers": list(self.numbers), "samples": [list(s) for s in self.samples],
                "difference": self.difference, "interval": list(self.interval),
                "verdict": self.verdict, "text": self.text()}


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL
                   ) -> tuple[float, float, float]:
    """(difference of means, low, high) by Welch's t."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(vx + vy)
    if se == 0:
        return diff, diff, diff
    dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return diff, diff - half, diff + half


def confirm_finalists(evaluator: Evaluator, finalists: Sequence[tuple[dict, object]],
                      repeats: int) -> Confirmation | None:
    """``finalists``: the two best (row, config) by throughput, best first. Each row's own
    trial counts as its first run; ``repeats`` more runs follow, interleaved."""
    if len(finalists) < 2 or repeats < 1:
        return None
    samples: list[list[float]] = [[row["metrics"][THROUGHPUT]] for row, _ in finalists[:2]]
    for repeat in range(1, repeats + 1):
        for i, (_, config) in enumerate(finalists[:2]):
            row, _ = evaluator.evaluate(config, repeat=repeat)
            samples[i].append(row["metrics"].get(THROUGHPUT, 0.0) if row["status"] == "ok"
                              else 0.0)
    diff, low, high = welch_interval(samples[0], samples[1])
    verdict = "winner" if low > 0 or high < 0 else "tie"
    if high < 0:  # the runner-up was in fact better: say so in the numbers' order
        finalists = finalists[::-1]
        samples = samples[::-1]
        diff, low, high = -diff, -high, -low
    return Confirmation((finalists[0][0]["number"], finalists[1][0]["number"]),
                        (tuple(samples[0]), tuple(samples[1])), diff, (low, high), verdict)
