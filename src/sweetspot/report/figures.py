"""What each figure shows, as plain data: pure functions of the study, no matplotlib.

Each ``*_data`` function returns None (or an empty tuple) when the study holds nothing to draw,
and the renderer then skips that figure. A "sweep" is the baseline plus the one-knob-at-a-time
trials of one knob: every trial in it differs from the baseline in that knob only, so each point
isolates that knob's effect. Gains are relative changes of the number itself (``value / baseline
- 1``), so +0.35 throughput is better and -0.12 P99 E2EL is better, as in the study's picks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweetspot.report.study import (
    OFAT,
    canonical,
    display_label,
    is_ok,
    memory_gib,
    metric,
    ofat_knobs,
    relative_change,
    trial_number,
)
from sweetspot.tune.picks import pareto_numbers
from sweetspot.tune.result import THROUGHPUT, StudyResult, TrialResult

P99_E2EL = "p99_e2el_ms"
P99_TTFT = "p99_ttft_ms"
P99_TPOT = "p99_tpot_ms"
TPOT_CENTRES = ("mean_tpot_ms", "median_tpot_ms")  # first one every speculative point has wins
LOG_X_SPAN = 8.0  # numeric sweeps spanning at least this ratio get a log2 x axis


@dataclass(frozen=True, slots=True)
class SweepPoint:
    value: Any  # the knob's config value (JSON)
    label: str  # how the value reads on axes and in tables
    trial: int  # trial number
    status: str  # ok | oom | invalid | crash | timeout
    is_baseline: bool
    output_throughput: float | None  # tok/s; None unless ok
    p99_ttft_ms: float | None
    p99_e2el_ms: float | None
    memory_gib: float | None  # device memory the config uses


@dataclass(frozen=True, slots=True)
class SweepData:
    knob: str
    numeric: bool  # every value a number: a numeric x axis, else categorical
    log_x: bool  # numeric, positive and spanning >= LOG_X_SPAN
    points: tuple[SweepPoint, ...]  # one per distinct value, in axis order

    @property
    def ok_points(self) -> tuple[SweepPoint, ...]:
        return tuple(p for p in self.points if p.status == "ok")


@dataclass(frozen=True, slots=True)
class SpeculativeSetup:
    label: str
    trial: int
    output_throughput: float
    tpot_ms: float | None  # the centre named by SpeculativeData.tpot_metric
    p99_tpot_ms: float | None
    throughput_change: float | None  # relative to the reference (0.2 = 20 % more)
    tpot_change: float | None
    p99_tpot_change: float | None


@dataclass(frozen=True, slots=True)
class SpeculativeData:
    reference: str  # label of the setup others are compared with ("off" when measured)
    tpot_metric: str  # mean_tpot_ms, else median_tpot_ms when the trials lack the mean
    setups: tuple[SpeculativeSetup, ...]  # reference first, then the sweep's order


@dataclass(frozen=True, slots=True)
class KnobGain:
    knob: str
    label: str  # the best value
    trial: int
    output_throughput: float
    gain_pct: float  # best ok trial's throughput vs the baseline's, in percent


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    trial: int
    output_throughput: float
    p99_e2el_ms: float
    goals: tuple[str, ...]  # goals whose pick is this trial
    over_capacity: bool = False  # run above its capacity: its latency is not comparable

    @property
    def label(self) -> str:
        """``"low-latency, balanced (#36)"`` for a picked point, else empty."""
        return f"{', '.join(self.goals)} (#{self.trial})" if self.goals else ""


@dataclass(frozen=True, slots=True)
class ParetoData:
    points: tuple[ParetoPoint, ...]  # every ok trial with both metrics, by trial number
    front: tuple[ParetoPoint, ...]  # the front, by throughput ascending (the line's order)
    failed: tuple[tuple[int, str], ...]  # (trial number, status) of trials that are not ok


def sweep_data(study: StudyResult, knob: str) -> SweepData | None:
    """The baseline plus every one-knob trial of ``knob``; None when the knob was not swept.

    One point per distinct value: the baseline wins a repeated value (it is the reference),
    otherwise the first trial that tried it.
    """
    base = study.baseline_trial
    swept = [t for t in study.trials if t.phase == OFAT and t.knob == knob]
    if not swept:
        return None
    points: dict[str, SweepPoint] = {}
    for trial in ([base] if base is not None else []) + swept:
        value = trial.config.get(knob)
        points.setdefault(canonical(value), _point(trial, knob, value, trial is base))
    values = [p.value for p in points.values()]
    numeric = all(_is_number(v) for v in values)
    if numeric:
        ordered = sorted(points.values(), key=lambda p: p.value)
    else:
        first_seen = {canonical(v): i for i, v in enumerate(values)}
        ordered = sorted(points.values(), key=lambda p: _category_key(p.value, first_seen))
    # A log axis needs a plotted value to scale from: a sweep whose trials all failed draws
    # only failure marks, which matplotlib's log locator cannot place ("Data cannot be
    # log-scaled").
    any_ok = any(p.output_throughput is not None for p in ordered)
    log_x = (numeric and any_ok and min(values) > 0
             and max(values) / min(values) >= LOG_X_SPAN)
    return SweepData(knob=knob, numeric=numeric, log_x=log_x, points=tuple(ordered))


def sweeps(study: StudyResult) -> tuple[SweepData, ...]:
    """One sweep per one-knob-at-a-time knob, in the order the study tried them."""
    return tuple(s for k in ofat_knobs(study) if (s := sweep_data(study, k)) is not None)


def max_model_len_data(study: StudyResult) -> SweepData | None:
    """The guide's figure: max-model-len vs throughput and memory, ok points only (>= 2)."""
    sweep = sweep_data(study, "max_model_len")
    if sweep is None or not sweep.numeric:
        return None
    return _ok_only(sweep)


def policy_latency_data(study: StudyResult) -> SweepData | None:
    """P99 TTFT and P99 E2EL per scheduling policy, ok points only (>= 2)."""
    sweep = sweep_data(study, "scheduling_policy")
    return None if sweep is None else _ok_only(sweep)


def speculative_data(study: StudyResult) -> SpeculativeData | None:
    """Each speculative setup against no speculation (or the baseline when "off" was not run)."""
    sweep = sweep_data(study, "speculative")
    if sweep is None:
        return None
    ok = [p for p in sweep.ok_points if p.output_throughput is not None]
    reference = next((p for p in ok if p.value is None), None)
    reference = reference or next((p for p in ok if p.is_baseline), None)
    if reference is None or len(ok) < 2:
        return None
    centre = next(
        (m for m in TPOT_CENTRES if all(metric(study.trial(p.trial), m) is not None for p in ok)),
        TPOT_CENTRES[0],
    )
    ref_trial = study.trial(reference.trial)
    setups = []
    for point in [reference] + [p for p in ok if p is not reference]:
        trial = study.trial(point.trial)
        tpot, p99 = metric(trial, centre), metric(trial, P99_TPOT)
        setups.append(SpeculativeSetup(
            label=point.label,
            trial=point.trial,
            output_throughput=point.output_throughput,
            tpot_ms=tpot,
            p99_tpot_ms=p99,
            throughput_change=relative_change(point.output_throughput,
                                              reference.output_throughput),
            tpot_change=relative_change(tpot, metric(ref_trial, centre)),
            p99_tpot_change=relative_change(p99, metric(ref_trial, P99_TPOT)),
        ))
    return SpeculativeData(reference=reference.label, tpot_metric=centre, setups=tuple(setups))


def knob_gains_data(study: StudyResult) -> tuple[KnobGain, ...]:
    """Each swept knob's best ok value, as percent throughput over the baseline, best first.

    Only the knob's own trials compete (the baseline does not), so a knob whose every value loses
    shows a negative gain; a knob with no ok trial, or a study without an ok baseline, shows none.
    """
    base = metric(study.baseline_trial, THROUGHPUT)
    if not base:
        return ()
    gains = []
    for sweep in sweeps(study):
        ok = [p for p in sweep.ok_points if not p.is_baseline and p.output_throughput is not None]
        if ok:
            best = max(ok, key=lambda p: p.output_throughput)
            gains.append(KnobGain(
                knob=sweep.knob, label=best.label, trial=best.trial,
                output_throughput=best.output_throughput,
                gain_pct=100.0 * (best.output_throughput / base - 1.0),
            ))
    return tuple(sorted(gains, key=lambda g: -g.gain_pct))


def pareto_data(study: StudyResult) -> ParetoData | None:
    """All ok trials in throughput-vs-P99-E2EL space, the front, failures and picks.

    The front is the study's own ``pareto`` list when it has one (the tuner may restrict it, e.g.
    to SLO-meeting trials), else (a study stopped before it chose) computed here as the tuner
    does, without the trials over capacity. None with fewer than two ok points.
    """
    goals: dict[int, list[str]] = {}
    for pick in study.picks:
        if pick.trial is not None:
            goals.setdefault(pick.trial, []).append(pick.goal)
    points = []
    failed = []
    seen: set[int] = set()
    for trial in study.trials:
        number = trial_number(trial)
        if number in seen:  # a study may list a trial twice: one point each
            continue
        seen.add(number)
        x, y = metric(trial, THROUGHPUT), metric(trial, P99_E2EL)
        if not is_ok(trial):
            failed.append((number, trial.status))
        elif x is not None and y is not None:
            points.append(ParetoPoint(number, x, y, tuple(goals.get(number, ())),
                                      trial.over_capacity))
    if len(points) < 2:
        return None
    by_number = {p.trial: p for p in points}
    if study.pareto:
        front_numbers = tuple(n for n in study.pareto if n in by_number)
    else:
        front_numbers = pareto_numbers((p.trial, p.output_throughput, p.p99_e2el_ms)
                                       for p in points if not p.over_capacity)
    front = sorted((by_number[n] for n in front_numbers),
                   key=lambda p: (p.output_throughput, p.p99_e2el_ms))
    return ParetoData(points=tuple(points), front=tuple(front), failed=tuple(failed))


def _point(trial: TrialResult, knob: str, value: Any, is_baseline: bool) -> SweepPoint:
    return SweepPoint(
        value=value,
        label=display_label(value, knob),
        trial=trial_number(trial),
        status=trial.status,
        is_baseline=is_baseline,
        output_throughput=metric(trial, THROUGHPUT),
        p99_ttft_ms=metric(trial, P99_TTFT),
        p99_e2el_ms=metric(trial, P99_E2EL),
        memory_gib=memory_gib(trial),
    )


def _ok_only(sweep: SweepData) -> SweepData | None:
    ok = sweep.ok_points
    if len(ok) < 2:
        return None
    values = [p.value for p in ok]
    log_x = sweep.numeric and min(values) > 0 and max(values) / min(values) >= LOG_X_SPAN
    return SweepData(knob=sweep.knob, numeric=sweep.numeric, log_x=log_x, points=ok)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _category_key(value: Any, first_seen: Mapping[str, int]) -> tuple:
    """Default first, then numbers ascending, then off/on, then the rest as first tried."""
    if value is None:
        return (0, 0.0)
    if _is_number(value):
        return (1, float(value))
    if isinstance(value, bool):
        return (2, float(value))
    return (3, float(first_seen[canonical(value)]))
