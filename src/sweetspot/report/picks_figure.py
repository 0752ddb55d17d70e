"""The picks figure's data: every goal's own numbers against the baseline's.

A pick is chosen for one goal but deployed for all of them, so the figure shows each pick on
every number a goal is judged on (throughput, P99 TTFT, P99 TPOT, device memory), not only on
its own: a low-latency pick that triples TTFT, or a memory saving, must be visible at a glance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sweetspot.report.figures import P99_TPOT, P99_TTFT, THROUGHPUT
from sweetspot.report.study import (
    is_ok,
    memory_gib,
    metric,
    picked,
    relative_change,
    trial_number,
)
from sweetspot.tune.result import StudyResult, TrialResult

CAPACITY = "capacity_request_throughput"  # req/s the trial can serve, when the tuner knows it


@dataclass(frozen=True, slots=True)
class GoalMetric:
    """One panel of the picks figure: a number every goal is judged on."""

    key: str  # a metrics key (vllm bench serve's), or "memory_bytes" (a row field)
    title: str  # "P99 TTFT"
    unit: str  # as shown: tok/s, ms, GiB
    higher_is_better: bool
    latency: bool  # measured latency: meaningless when the trial ran above its capacity


PICK_METRICS = (
    GoalMetric(THROUGHPUT, "output throughput", "tok/s", True, False),
    GoalMetric(P99_TTFT, "P99 TTFT", "ms", False, True),
    GoalMetric(P99_TPOT, "P99 TPOT", "ms", False, True),
    GoalMetric("memory_bytes", "device memory", "GiB", False, False),
)
SAME_WITHIN = 0.01  # a relative change this small reads as "same" (noise, not a trade)
BASELINE, BETTER, WORSE, SAME, UNRATED, OVER_CAPACITY, MISSING_VALUE = (
    "baseline", "better", "worse", "same", "unrated", "over capacity", "missing")


@dataclass(frozen=True, slots=True)
class PickBar:
    goal: str  # "baseline" or the pick's goal
    trial: int
    value: float | None  # in the panel's unit; None when the trial has no such number
    change: float | None  # value / baseline value - 1; None when either side is unusable
    verdict: str  # baseline | better | worse | same | unrated | over capacity | missing
    text: str  # the bar's label: "17,093 (+2,439 %)", "over capacity", "no data"


@dataclass(frozen=True, slots=True)
class PicksPanel:
    metric: GoalMetric
    reference: float | None  # the baseline's value when it is comparable: the marked line
    bars: tuple[PickBar, ...]  # the baseline, then each pick in the study's goal order


@dataclass(frozen=True, slots=True)
class PicksData:
    panels: tuple[PicksPanel, ...]  # one per PICK_METRICS entry
    note: str  # why some latencies are not compared; empty when all are


def picks_data(study: StudyResult) -> PicksData | None:
    """Every goal's own numbers against the baseline: one panel per PICK_METRICS entry.

    A row flagged ``over_capacity`` was offered more traffic than it can serve, so its queue and
    latencies grew for as long as the run lasted: its latency bars are kept (the number is what
    was measured) but are neither compared nor given a verdict, and the note says why. None
    without a baseline or a pick whose trial exists.
    """
    base = study.baseline_trial
    picks = [(pick.goal, trial) for pick, trial in picked(study)]
    if base is None or not picks:
        return None
    rows = [(BASELINE, base), *picks]
    panels = []
    for m in PICK_METRICS:
        reference = _goal_value(base, m)
        if reference is not None and m.latency and base.over_capacity:
            reference = None
        panels.append(PicksPanel(m, reference, tuple(
            _pick_bar(goal, row, m, reference) for goal, row in rows)))
    return PicksData(panels=tuple(panels), note=_over_capacity_note(rows))


def _goal_value(trial: TrialResult, m: GoalMetric) -> float | None:
    if m.key == "memory_bytes":
        return memory_gib(trial) if is_ok(trial) else None
    return metric(trial, m.key)


def _pick_bar(goal: str, trial: TrialResult, m: GoalMetric,
              reference: float | None) -> PickBar:
    number = trial_number(trial)
    value = _goal_value(trial, m)
    if value is None:
        return PickBar(goal, number, None, None, MISSING_VALUE, "no data")
    if m.latency and trial.over_capacity:
        return PickBar(goal, number, value, None, OVER_CAPACITY, "over capacity")
    shown = f"{value:,.{_digits(value, m.unit)}f}"  # the unit is in the panel's title
    if goal == BASELINE:
        return PickBar(goal, number, value, None, BASELINE, shown)
    change = relative_change(value, reference)
    if change is None:
        return PickBar(goal, number, value, None, UNRATED, shown)
    if abs(change) < SAME_WITHIN:
        verdict = SAME
    else:
        verdict = BETTER if (change > 0) == m.higher_is_better else WORSE
    return PickBar(goal, number, value, change, verdict, f"{shown} ({percent(change)})")


def percent(change: float) -> str:
    """A relative change as text: one decimal below 10 % (-0.4 %), none above (+2,439 %)."""
    pct = 100 * change
    return f"{pct:+,.{1 if abs(round(pct, 1)) < 10 else 0}f} %"


def _digits(value: float, unit: str) -> int:
    """Digits after the point: enough to tell bars apart, no more (1,882; 23.2; 1.76; 73.4 GiB)."""
    if unit == "GiB":
        return 1
    return 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2


def _over_capacity_note(rows: Iterable[tuple[str, TrialResult]]) -> str:
    over: dict[int, float | None] = {}
    for _, trial in rows:
        if trial.over_capacity:
            over[trial_number(trial)] = metric(trial, CAPACITY)
    if not over:
        return ""
    parts = [f"#{n}" + ("" if cap is None else f": {cap:.2f} req/s") for n, cap in over.items()]
    return (f"Hatched: latency measured above the trial's capacity ({'; '.join(parts)}), so "
            "its queue grew through the run: not comparable.")
