"""Four picks from one study's rows, plus the Pareto front, each with why it wins.

Candidates are the rows that ran (status ok), served every request, keep up with the offered rate
(capacity at steady state at least the rate: above it the latencies measure the run's length, not
the server) and met every SLO (``slo_ok`` says all three). Each goal is judged on its own figure:

- max-throughput: capacity, output tokens/s at steady state (higher);
- low-latency: the P99 latencies the SLOs name (default: P99 TTFT and P99 TPOT), as the geometric
  mean of each relative to the best candidate's (lower), at the offered rate;
- memory-limited: device memory (lower; within ``memory_limit_bytes`` when given);
- balanced: throughput relative to the best times latency relative to the best (higher).

A pick only departs from the baseline where that is worth it beyond the noise: among the
candidates whose figure is within ``resolution`` of the best (2 % on the simulator, 5 % measured
unless a paired confirmation says more), the one with the fewest knobs changed from the baseline
wins, the figure breaking ties — so the baseline itself wins when nothing is measurably better,
and a knob whose change buys nothing keeps the user's value (the study runs those reverted
configurations so that they can win). If no candidate keeps up, only a max-throughput pick is
made, with the most any trial served and where more capacity comes from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sweetspot.tune.result import THROUGHPUT, TrialResult

__all__ = ["DEFAULT_LATENCY_KEYS", "GOALS", "RESOLUTION", "Pick", "candidates", "changed_knobs",
           "choose_picks", "latency_keys", "pareto_front", "pareto_numbers",
           "reasons_for", "rivals"]

GOALS = ("max-throughput", "low-latency", "memory-limited", "balanced")
LATENCY = "p99_e2el_ms"  # the Pareto front's latency axis
DEFAULT_LATENCY_KEYS = ("p99_ttft_ms", "p99_tpot_ms")
# The smallest relative difference a pick acts on: the simulator is deterministic per seed, so
# its resolution is what its own repeats move; a measured single run is noisier.
RESOLUTION = {"sim": 0.02, "measured": 0.05}
NEGLIGIBLE = 0.005  # a difference too small to mention at all


@dataclass(frozen=True, slots=True)
class Pick:
    goal: str
    row: TrialResult
    gain: dict[str, float]  # relative change vs the baseline: +0.35 = 35 % more
    reasons: tuple[str, ...]
    # Trials the simulator's intervals cannot separate from this one on the goal's figure
    # (``rivals``): the ones to measure before betting on the ranking.
    rivals: tuple[int, ...] = ()


def _tp(row: TrialResult) -> float:
    return row.throughput


def _lat(row: TrialResult) -> float:
    return float(row.metrics.get(LATENCY, float("inf")))


def latency_keys(slos: Mapping[str, float] | None) -> tuple[str, ...]:
    """The latency figures the low-latency goal is judged on: those the SLOs name."""
    named = tuple(k for k in (slos or {}) if k.endswith("_ms"))
    return named or DEFAULT_LATENCY_KEYS


def candidates(rows: Sequence[TrialResult]) -> list[TrialResult]:
    return [r for r in rows if r.ran and r.slo_ok and not r.over_capacity and r.keeps_up]


def changed_knobs(row: TrialResult, baseline_config: Mapping | None) -> list[str]:
    """Knobs whose value differs from the baseline's."""
    if baseline_config is None:
        return []
    config = row.config
    return [k for k in sorted(set(config) | set(baseline_config))
            if config.get(k) != baseline_config.get(k)]


def pareto_front(rows: Sequence[TrialResult]) -> list[TrialResult]:
    """Rows no other row beats on both throughput (higher) and P99 latency (lower), by
    ascending throughput; rows over capacity have no latency to compare."""
    # Not Optuna's study.best_trials, which answers another question: a throughput study has
    # one objective (no latency among its values); its feasible trials meet every constraint
    # told, so it would drop rows kept here (an SLO missed, a request failed, a capacity short
    # of the offered rate by less than the resolution); it counts the sampler's repeats of a
    # configuration as trials of their own (ties kept); and the report draws its front from
    # plain points, with no study (pareto_numbers).
    ok = {r.number: r for r in rows if r.number is not None and r.ran and not r.over_capacity}
    return [ok[n] for n in pareto_numbers((n, _tp(r), _lat(r)) for n, r in ok.items())]


def pareto_numbers(points: Iterable[tuple[int, float, float]]) -> tuple[int, ...]:
    """Of (number, throughput, latency) points, the numbers not dominated in (higher
    throughput, lower latency), by throughput ascending. Walking from the highest throughput
    down, a point is on the front exactly when its latency beats every point seen so far; ties
    keep the lower number. The study's front and the report's figure both come from here."""
    ordered = sorted(points, key=lambda p: (-p[1], p[2], p[0]))
    front: list[int] = []
    best_latency = float("inf")
    for number, _, latency in ordered:
        if latency < best_latency:
            front.append(number)
            best_latency = latency
    return tuple(reversed(front))


@dataclass(frozen=True, slots=True)
class _Goal:
    name: str
    figure: Callable[[TrialResult], float]
    higher: bool  # higher is better


def _goals(pool: Sequence[TrialResult], keys: Sequence[str]) -> list[_Goal]:
    best = {k: min((r.metrics[k] for r in pool if r.metrics.get(k)), default=1.0)
            for k in keys}

    def latency(row: TrialResult) -> float:  # geometric mean of each key relative to the best
        logs = [math.log(max(row.metrics.get(k, math.inf), 1e-9) / (best[k] or 1.0))
                for k in keys]
        return math.exp(sum(logs) / len(logs)) if logs else 1.0

    best_tp = max((_tp(r) for r in pool), default=1.0) or 1.0
    best_lat = min((latency(r) for r in pool), default=1.0) or 1.0
    return [
        _Goal("max-throughput", _tp, True),
        _Goal("low-latency", latency, False),
        _Goal("memory-limited", lambda r: r.memory_bytes or math.inf, False),
        _Goal("balanced", lambda r: (_tp(r) / best_tp) * (best_lat / latency(r)), True),
    ]


def rivals(pick: Pick, rows: Sequence[TrialResult], slos: Mapping[str, float] | None,
           relative: float, most: int = 3) -> list[TrialResult]:
    """The feasible trials whose figure for ``pick``'s goal lies within the pick's when both
    may be ``relative`` off either way (intervals that overlap: a ratio within
    (1 + relative)^2), best first. Memory is the memory model's, not the step model's: the
    memory-limited goal has none."""
    pool = candidates(rows)
    goal = next((g for g in _goals(pool, latency_keys(slos)) if g.name == pick.goal), None)
    if goal is None or pick.goal == "memory-limited":
        return []
    mine = goal.figure(pick.row)
    band = (1 + relative) ** 2
    # A trial with the pick's very numbers is the same server spelled otherwise (a default
    # set explicitly): nothing to separate.
    near = [r for r in pool if r.number != pick.row.number and r.metrics != pick.row.metrics
            and (goal.figure(r) * band >= mine if goal.higher else goal.figure(r) <= mine * band)]
    near.sort(key=lambda r: -goal.figure(r) if goal.higher else goal.figure(r))
    return near[:most]


def _within(value: float, best: float, higher: bool, resolution: float) -> bool:
    if higher:
        return value >= best * (1 - resolution)
    return value <= best * (1 + resolution)


def _best_of(goal: _Goal, pool: Sequence[TrialResult], base_config: Mapping | None,
             resolution: float) -> tuple[TrialResult, TrialResult]:
    """(the pick, the row with the best figure): the simplest row within ``resolution``."""
    sign = -1 if goal.higher else 1
    best = min(pool, key=lambda r: (sign * goal.figure(r), len(changed_knobs(r, base_config))))
    near = [r for r in pool if _within(goal.figure(r), goal.figure(best), goal.higher,
                                       resolution)]
    if not near:  # no figure to compare (a metric missing): the best as it stands
        return best, best
    pick = min(near, key=lambda r: (len(changed_knobs(r, base_config)), sign * goal.figure(r)))
    return pick, best


def choose_picks(rows: Sequence[TrialResult], baseline: TrialResult | None,
                 offered_rate: float | None,
                 memory_limit_bytes: int | None = None, *, resolution: float = 0.02,
                 slos: Mapping[str, float] | None = None,
                 acceptance: Callable[[TrialResult], str | None] | None = None
                 ) -> list[Pick]:
    """The picks; ``acceptance(row)`` describes the speculative acceptance a row assumed or
    measured (printed beside any pick that speculates)."""
    base_config = baseline.config if baseline is not None else None
    pool = candidates(rows)
    if not pool:
        ran = [r for r in rows if r.ran]
        if not ran or offered_rate is None or any(r.keeps_up for r in ran):
            return []
        row = max(ran, key=_tp)
        reasons = reasons_for("max-throughput", row, baseline, rows, resolution=resolution)
        return [Pick("max-throughput", row, _gain(row, baseline),
                     (*reasons, _overload_note(ran, offered_rate)))]
    keys = latency_keys(slos)
    picks = []
    for goal in _goals(pool, keys):
        eligible = pool
        if goal.name == "memory-limited":
            eligible = [r for r in pool if r.memory_bytes is not None
                        and (memory_limit_bytes is None or r.memory_bytes <= memory_limit_bytes)]
            if not eligible:
                continue
        row, best = _best_of(goal, eligible, base_config, resolution)
        reasons = reasons_for(goal.name, row, baseline, rows, resolution=resolution, keys=keys)
        reasons += _unmeasurable(goal, row, best, base_config, resolution)
        if acceptance is not None and row.config.get("speculative"):
            described = acceptance(row)
            if described:
                reasons += (described,)
        picks.append(Pick(goal.name, row, _gain(row, baseline), reasons))
    return picks


def _unmeasurable(goal: _Goal, row: TrialResult, best: TrialResult,
                  base_config: Mapping | None,
                  resolution: float) -> tuple[str, ...]:
    """What the best row changed that the pick leaves at the user's value, and why."""
    if _same(best, row) or base_config is None:
        return ()
    reverted = [k for k in changed_knobs(best, base_config)
                if row.config.get(k) == base_config.get(k)]
    if not reverted:
        return ()
    diff = goal.figure(best) / (goal.figure(row) or 1.0) - 1
    if abs(diff) < NEGLIGIBLE:  # the best only differs by rounding: nothing worth saying
        return ()
    what = ", ".join(f"{k} {_text(best.config.get(k))}" for k in reverted)
    return (f"no measurable gain from {what}: trial {best.number} with "
            f"{'it' if len(reverted) == 1 else 'them'} is within the {resolution:.0%} "
            f"resolution ({diff:+.1%} on this goal's figure)",)


def _overload_note(pool: Sequence[TrialResult], offered_rate: float | None) -> str:
    """What an operator does next when nothing keeps up: the most any trial served, and where
    the missing capacity comes from."""
    best = max(pool, key=lambda r: r.request_rate)
    capacity = best.request_rate
    return (f"no configuration's capacity reaches the offered {offered_rate:g} req/s (the "
            f"most: {capacity:.2f} req/s at steady state, trial {best.number}), so none is "
            "sure to keep up; offer less traffic per replica (--rate), or more GPUs "
            "(replicas, tensor parallelism)")


def _gain(row: TrialResult, baseline: TrialResult | None) -> dict[str, float]:
    if baseline is None or not baseline.ran:
        return {}
    out = {}
    comparable = not row.over_capacity and not baseline.over_capacity
    for key in (THROUGHPUT, LATENCY, "p99_ttft_ms", "p99_tpot_ms"):
        if key != THROUGHPUT and not comparable:
            continue
        base, new = baseline.metrics.get(key), row.metrics.get(key)
        if base and new is not None:
            out[key] = new / base - 1
    if baseline.memory_bytes and row.memory_bytes:
        out["memory_bytes"] = row.memory_bytes / baseline.memory_bytes - 1
    return out


def _same(row: TrialResult, other: TrialResult | None) -> bool:
    return other is not None and row.number == other.number


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _figure_line(goal: str, row: TrialResult, baseline: TrialResult | None,
                 keys: Sequence[str]) -> str:
    m = row.metrics
    rate = row.offered_rate
    at = f" at {rate:.3g} req/s" if rate else " at the workload's rate"
    if goal == "max-throughput":
        return (f"capacity {_tp(row):,.0f} output tok/s ({m.get('request_throughput', 0):.2f} "
                "req/s) at steady state")
    if goal == "low-latency":
        figures = ", ".join(f"{_key_label(k)} {_ms(m.get(k))}" for k in keys)
        what = _key_label(keys[0]) if len(keys) == 1 else (
            " and ".join(_key_label(k) for k in keys) + " together (geometric mean)")
        line = f"lowest {what}{at}: {figures}"
        if baseline is not None and not _same(row, baseline) and baseline.metrics \
                and not baseline.over_capacity:
            line += " (baseline: " + ", ".join(_ms(baseline.metrics.get(k))
                                               for k in keys) + ")"
        return line
    if goal == "memory-limited":
        held = (row.memory_bytes or 0) / 2**30
        line = f"smallest footprint that serves the traffic: {held:.1f} GiB"
        if baseline is not None and baseline.memory_bytes:
            line += f" (baseline {baseline.memory_bytes / 2**30:.1f} GiB)"
        return line
    return (f"best throughput x latency trade: {_tp(row):,.0f} tok/s with "
            + ", ".join(f"{_key_label(k)} {_ms(m.get(k))}" for k in keys) + at)


def _key_label(key: str) -> str:
    stat, _, rest = key.partition("_")
    return f"{stat.upper() if stat.startswith('p') else stat} {rest.removesuffix('_ms').upper()}"


def reasons_for(goal: str, row: TrialResult, baseline: TrialResult | None,
                rows: Sequence[TrialResult], *,
                resolution: float = 0.02, keys: Sequence[str] = DEFAULT_LATENCY_KEYS
                ) -> tuple[str, ...]:
    """Why this row wins its goal, from the simulator's or server's counters and the sweeps."""
    out: list[str] = [_figure_line(goal, row, baseline, keys)]
    facts, config = row.facts, row.config
    if _same(row, baseline):
        out.append("your configuration: nothing measurably better for this goal")
    seqs = config.get("max_num_seqs")
    batch = facts.get("mean_batch")
    peak_kv = facts.get("peak_kv_usage")
    if peak_kv is not None and peak_kv >= 0.9:
        out.append(f"KV-bound: the cache was {peak_kv:.0%} full at peak"
                   + (f" with {batch:.0f} requests running on average" if batch else ""))
    elif seqs and batch and batch >= 0.85 * seqs:
        out.append(f"batch-bound: {batch:.0f} requests running on average against "
                   f"max-num-seqs {seqs}")
    if facts.get("preemptions"):
        out.append(f"{facts['preemptions']} preemptions (KV cache ran out)")
    share = facts.get("compute_bound_share")
    if share is not None and row.metrics:
        out.append(f"{share:.0%} of steps compute-bound, {1 - share:.0%} memory-bound")
    if baseline is not None:
        for knob in changed_knobs(row, baseline.config):
            out.append(f"{knob}: {_text(baseline.config.get(knob))} -> "
                       f"{_text(config.get(knob))}"
                       + _sweep_note(knob, config.get(knob), baseline, rows, resolution))
    return tuple(out)


def _sweep_note(knob: str, value, baseline: TrialResult, rows: Sequence[TrialResult],
                resolution: float) -> str:
    """How the knob alone did in its one-knob sweep, when the study has one and it mattered."""
    for r in rows:
        if r.phase == "ofat" and r.knob == knob and r.config.get(knob) == value:
            if r.status != "ok" or not baseline.ran:
                return f" (alone: {r.status})"
            change = _tp(r) / (_tp(baseline) or 1.0) - 1
            return f" (alone: {change:+.0%} throughput)" if abs(change) > resolution else ""
    return ""


def _text(value) -> str:
    if isinstance(value, dict):
        return f"{value.get('method')} k={value.get('num_speculative_tokens')}"
    return "default" if value is None else str(value)
