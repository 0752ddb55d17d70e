"""``sweetspot compare``: A and B run in pairs until every guarded metric is decided.

Each side is a configuration on a backend (two ``vllm serve`` commands on one simulator or one
machine's real vLLM), or a running endpoint. A pair is one repeat: A, then B, each on a fresh
server (the backend's ``serve``: the simulator draws each server's own speed, a real backend
starts one), each evaluated as ``tune`` evaluates a trial (``tune.evaluate.Evaluator``: the
capacity run, then the traffic run at the offered rate, on one server), both on the same
requests (the repeat's seed). Pairs follow one another A B A B …, so the machine's drift falls
on both sides. After each pair from ``min_repeats`` on, the metrics are judged
(``guard.verdict``: the level of that look from α spent over the looks) and the comparison stops
once every guarded metric is decided, or after ``max_repeats`` pairs. A side that fails (a
server that does not start, runs out of memory, or fails every request) ends the comparison:
a failed B is a regression with its cause, a failed A leaves nothing to hold B against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweetspot.backends.base import Trial
from sweetspot.guard.metrics import METRICS, metric_for
from sweetspot.guard.requests import PerRequest
from sweetspot.guard.verdict import ALPHA, MetricVerdict, judge_repeats, judge_requests, look_levels
from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.result import TrialResult

__all__ = ["SPEED_SPREAD", "ComparePlan", "Comparison", "Side", "SideRun", "judge", "run_compare",
           "side_run"]

# The simulated servers' spread of speed (log-sd of a server's step times, ``SimBackend``; the
# capacity moves as f^-1.09 with the step factor f). RESULTS.md records a ±4 % run-to-run drift
# of one configuration (the CPU build), read here as about ±2.5 sd, and one pair of fresh H100
# servers 9 % apart in their engine logs, a rare pair at this spread. The lower reading, and what
# it costs (benchmarks/compare_rates.py, the gate's α shared by four guarded metrics): five pairs
# find a 10 % capacity gain in 98 % of seeds at 1.5 %, 84 % at 2 %, fewer at 3 % (RESULTS.md);
# --speed-spread sets it, 0 turns it off.
SPEED_SPREAD = 0.015


@dataclass(frozen=True)
class Side:
    name: str  # "A" or "B"
    label: str  # the command or URL, for people
    evaluator: Evaluator  # A and B draw the same requests: one workload, seed and size
    config: ServingConfig  # what it serves (an endpoint: what it was told it runs)
    # (status, cause) of a command refused before any server: it fails every pair
    refusal: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SideRun:
    """One side's run in one pair."""

    status: str  # backends.base.STATUSES
    cause: str | None
    values: Mapping[str, float]  # metric key -> value (only those measured)
    requests: PerRequest | None = None  # the traffic run's requests, for one-run bootstraps
    over_capacity: bool = False  # its capacity fell short of the offered rate

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class ComparePlan:
    guarded: tuple[str, ...]  # the keys --fail-on-regression gates on
    tolerances: Mapping[str, float] = field(default_factory=dict)
    min_repeats: int = 2
    max_repeats: int = 5
    alpha: float = ALPHA
    goodput_ms: Mapping[str, float] = field(default_factory=dict)  # per-request SLOs
    seed: int = 0  # the bootstrap's


@dataclass(frozen=True)
class Comparison:
    a_label: str
    b_label: str
    source: str  # sim, vllm, endpoint, files
    runs: tuple[tuple[SideRun, SideRun], ...]  # the pairs, in order
    metrics: tuple[MetricVerdict, ...]
    plan: ComparePlan
    stopped_early: bool = False
    notes: tuple[str, ...] = ()  # the offered rate, the simulated spread, ...

    @property
    def failure(self) -> str | None:
        """Why a side failed (B first: that is the regression), or None."""
        for name, side in (("B", 1), ("A", 0)):
            failed = next((p[side] for p in self.runs if not p[side].ok), None)
            if failed is not None:
                return f"{name} failed ({failed.status}): {failed.cause}"
        return None

    @property
    def b_failed(self) -> bool:
        return any(not b.ok for _, b in self.runs)

    @property
    def regressions(self) -> tuple[str, ...]:
        """What makes B a regression: its failure, each guarded metric significantly worse."""
        found = [self.failure or ""] if self.b_failed else []
        return tuple(found + [m.metric.label for m in self.metrics if m.regression])

    @property
    def verdict(self) -> str:
        """worse (a regression), better (a guarded metric better, none worse), or no
        significant difference."""
        if self.regressions:
            return "worse"
        if any(not a.ok for a, _ in self.runs):
            return "better"  # B served where A failed
        if any(m.guarded and m.verdict == "better" for m in self.metrics):
            return "better"
        return "no significant difference"

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a_label, "b": self.b_label, "source": self.source,
                "verdict": self.verdict, "regressions": list(self.regressions),
                "failure": self.failure, "pairs": len(self.runs),
                "stopped_early": self.stopped_early, "notes": list(self.notes),
                "plan": {"min_repeats": self.plan.min_repeats,
                         "max_repeats": self.plan.max_repeats, "alpha": self.plan.alpha,
                         "guarded": list(self.plan.guarded),
                         "tolerances": dict(self.plan.tolerances)},
                "metrics": [m.to_dict() for m in self.metrics],
                "runs": [[{"status": r.status, "cause": r.cause, "values": dict(r.values),
                           "over_capacity": r.over_capacity} for r in pair]
                         for pair in self.runs]}


def side_run(row: TrialResult, trial: Trial,
             goodput_ms: Mapping[str, float] | None = None) -> SideRun:
    """One side's evaluation as the values compare judges."""
    if row.status != "ok" or not trial.runs:
        return SideRun(row.status, row.cause, {})
    values = {k: float(v) for k, v in row.metrics.items() if isinstance(v, int | float)}
    traffic = trial.runs[-1]
    if goodput_ms:
        from sweetspot.metrics.run import measure

        goodput = measure(traffic, slos=goodput_ms).result.request_goodput
        if goodput is not None:
            values["request_goodput"] = goodput
    if isinstance(row.facts.get("preemptions"), int | float):
        values["preemptions"] = float(row.facts["preemptions"])
    if row.memory_bytes is not None:
        values["peak_memory_bytes"] = float(row.memory_bytes)
    return SideRun("ok", None, values, PerRequest.from_records(traffic.records),
                   row.over_capacity)


def _keys(runs: Sequence[tuple[SideRun, SideRun]], plan: ComparePlan) -> list[str]:
    """The metrics to judge: the known ones either side measured, and every guarded one."""
    seen = {k for pair in runs for side in pair for k in side.values}
    keys = [m.key for m in METRICS if m.key in seen or m.key in plan.guarded]
    return keys + [k for k in plan.guarded if k not in keys]


def judge(runs: Sequence[tuple[SideRun, SideRun]], plan: ComparePlan, level: float
          ) -> tuple[MetricVerdict, ...]:
    """Every metric over the pairs in which both sides ran: over repeats from two pairs on, by
    a bootstrap over requests where there is one pair (``guard.verdict``)."""
    ok = [pair for pair in runs if pair[0].ok and pair[1].ok]
    # The gate's error is shared among the guarded metrics (Bonferroni): one look's α, split.
    guarded_level = 1 - (1 - level) / max(1, len(plan.guarded))
    verdicts = []
    for key in _keys(runs, plan):
        metric = metric_for(key)
        guarded = key in plan.guarded
        options = dict(level=guarded_level if guarded else level,
                       tolerance=plan.tolerances.get(key, 0.0), guarded=guarded)
        a, b = ([p[i].values.get(key) for p in ok] for i in (0, 1))
        verdict = None
        if len(ok) == 1 and ok[0][0].requests is not None and ok[0][1].requests is not None:
            verdict = judge_requests(metric, ok[0][0].requests, ok[0][1].requests,
                                     seed=plan.seed, **options)
        verdicts.append(verdict or judge_repeats(metric, a, b, **options))
    return tuple(verdicts)


def run_compare(a: Side, b: Side, plan: ComparePlan, *, source: str,
                notes: Sequence[str] = (),
                on_pair: Callable[[int, tuple[SideRun, SideRun]], None] | None = None
                ) -> Comparison:
    """Pairs A B, A B, … until every guarded metric is decided (from ``min_repeats`` on), a
    side fails, or ``max_repeats`` pairs ran (see the module docstring)."""
    levels = look_levels(plan.min_repeats, plan.max_repeats, plan.alpha)
    runs: list[tuple[SideRun, SideRun]] = []
    metrics: tuple[MetricVerdict, ...] = ()
    early = False
    for repeat in range(plan.max_repeats):
        pair = (_run(a, repeat, plan), _run(b, repeat, plan))
        runs.append(pair)
        if on_pair is not None:
            on_pair(repeat + 1, pair)
        if not (pair[0].ok and pair[1].ok):
            break
        n = len(runs)
        if n in levels and n < plan.max_repeats:
            metrics = judge(runs, plan, levels[n])
            if all(m.decided for m in metrics if m.guarded):
                early = True
                break
    if not early:
        metrics = judge(runs, plan, levels.get(len(runs), levels[plan.min_repeats]))
    return Comparison(a.label, b.label, source, tuple(runs), metrics, plan, early,
                      (*notes, *_over_capacity(runs)))


def _over_capacity(runs: Sequence[tuple[SideRun, SideRun]]) -> list[str]:
    """A note for each side whose capacity fell short of the offered rate: its latencies
    measure a queue that grew for as long as the traffic lasted."""
    notes = []
    for i, name in enumerate("AB"):
        short = sum(1 for pair in runs if pair[i].over_capacity)
        if short:
            notes.append(f"{name}'s capacity fell short of the offered rate in {short} of "
                         f"{len(runs)} run(s): its latencies there measure a growing queue")
    return notes


def _run(side: Side, repeat: int, plan: ComparePlan) -> SideRun:
    if side.refusal is not None:
        return SideRun(*side.refusal, values={})
    row, trial = side.evaluator.evaluate(side.config, repeat=repeat)
    return side_run(row, trial, plan.goodput_ms)
