"""The study loop: strategies propose configurations, the evaluator runs them, the store keeps
every trial, the budget stops it.

Strategies (``STRATEGIES``):
- ``ofat`` — the guide's method: the baseline, then each knob swept alone from it, then the
  combination of each knob's best value;
- ``grid`` — every configuration of the space, in the seeded random order of Optuna's
  GridSampler (so a budget cut gives a uniform sample: "grid-random"), which processes serving
  one study split between them;
- ``optuna`` — TPE on throughput with the SLOs and failures as constraints (failed trials are
  told to the sampler as infeasible, not dropped), or NSGA-II on throughput vs P99 latency with
  ``objective="pareto"``;
- ``auto`` (the default) — ``ofat``, then ``optuna`` from everything learnt, until the budget;
- ``rate`` — the baseline alone, then the highest request rate at which it meets the SLOs
  (``rate.py``; the study runs that search after the loop).
Each configuration runs once per study: a strategy proposing a known one gets the stored row.

Trials in flight: the loop asks for up to ``in_flight`` trials before it waits for the first
(an executor may run them at once, ``tune.executors``), and tells Optuna their results in the
order it asked. The sampler so sees the same history at every ask whichever executor ran the
trials and whichever finished first: a study is a function of its seed, sampler and
``in_flight``. Trials asked for but not yet told are RUNNING in the storage, which the
samplers read (TPE's constant liar, the grid's unvisited points) so as not to propose them
again; a sampler's repeat of one still in flight waits its turn and is told as a duplicate.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.tune.evaluate import Evaluator, config_to_json
from sweetspot.tune.executors.base import Executor, Job, LocalExecutor, WorkerLost, failed_row
from sweetspot.tune.picks import LATENCY, candidates
from sweetspot.tune.result import TrialResult
from sweetspot.tune.space import SearchSpace, config_key
from sweetspot.tune.store import StudyStore

__all__ = ["STRATEGIES", "Budget", "Tuner", "config_from_json", "make_sampler"]

STRATEGIES = ("auto", "ofat", "grid", "optuna", "rate")
# The sampler may keep proposing stored configurations once the space is nearly exhausted.
MAX_DUPLICATES_IN_A_ROW = 200
WAIT_FOR_OTHERS_S = 0.5  # polling another process's trial of the configuration wanted
WORST_LATENCY_MS = 1e9
TRIES = 2  # a job whose worker is lost runs once more, then its trial is recorded failed


@dataclass(frozen=True, slots=True)
class Budget:
    trials: int | None = None  # configurations run (stored duplicates are free)
    seconds: float | None = None


def config_from_json(data: Mapping[str, Any]) -> ServingConfig:
    values = dict(data)
    if isinstance(values.get("speculative"), dict):
        values["speculative"] = SpeculativeConfig.from_dict(values["speculative"])
    return ServingConfig().replace(**values)


def make_sampler(objective: str, seed: int) -> optuna.samplers.BaseSampler:
    """Both samplers read each trial's constraints (``Trial.set_constraint``). TPE's constant
    liar counts trials still in flight as bad ones, so it does not propose them again (with
    one trial at a time there are none: it changes nothing)."""
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=20)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True,
                                      constant_liar=True)


@dataclass
class _InFlight:
    """A trial asked for and not yet told: its job on the executor, or (``job`` None) a
    sampler's repeat of a configuration in flight, told as a duplicate after it."""

    trial: optuna.trial.Trial
    key: str
    phase: str
    knob: str | None
    job: Job | None = None
    future: Future[TrialResult] | None = None
    stop: Callable[[bool], None] | None = None  # its heartbeat (``StudyStore.beat``)
    tries: int = 1


class Tuner:
    def __init__(self, store: StudyStore, evaluator: Evaluator, space: SearchSpace,
                 baseline: ServingConfig, *, budget: Budget, objective: str = "throughput",
                 seed: int = 0,
                 on_trial: Callable[[TrialResult, TrialResult | None], None] | None = None,
                 count_stored: bool = True, executor: Executor | None = None,
                 in_flight: int = 1, shared: bool = False):
        self.store = store
        self.evaluator = evaluator
        self.executor = executor or LocalExecutor(evaluator)
        self.in_flight = in_flight
        self.shared = shared  # the trial budget is the study's, spent by every process
        self._flying: deque[_InFlight] = deque()
        self.space = space
        self.baseline = baseline
        self.budget = budget
        self.objective = objective
        self.seed = seed
        self.on_trial = on_trial
        self._grid: optuna.samplers.GridSampler | None = None  # run_grid's, made at its start
        self.rows: dict[str, TrialResult] = {}
        self._refresh()  # a resumed study: what is done stays done
        # The budget counts the configurations this process runs, and those stored when it
        # opened a study it continues (--resume); a process that joins a running study
        # (count_stored=False) runs its own budget beside the others.
        self.counted = len(self.rows) if count_stored else 0
        self.ran = 0
        self.started_s = time.monotonic()

    # -- budget and bookkeeping

    def exhausted(self) -> bool:
        b = self.budget
        if self.shared:  # every process's trials, this one's in flight among them
            used = self.store.spent() if b.trials is not None else 0
        else:
            used = self.counted + self.ran + sum(1 for f in self._flying if f.job is not None)
        return ((b.trials is not None and used >= b.trials)
                or (b.seconds is not None and time.monotonic() - self.started_s >= b.seconds))

    def best(self) -> TrialResult | None:
        # Not Optuna's study.best_trial: it raises in a pareto study (two objectives), where
        # on_trial wants this too, and when no trial is feasible; and it would read every
        # stored trial from the storage after each trial, where the rows are at hand here.
        pool = candidates(list(self.rows.values()))
        return max(pool, key=lambda r: r.throughput) if pool else None

    def baseline_row(self) -> TrialResult | None:
        return self.rows.get(config_key(self.baseline))

    def _values(self, row: TrialResult) -> tuple[tuple[float, ...], dict[str, float]]:
        """Objective values and constraints (> 0 infeasible): a failed trial is infeasible
        with the worst values, so the sampler learns to avoid its region."""
        m = row.metrics
        ok = row.ran
        throughput = row.throughput if ok else 0.0
        constraints = {"ran": 0.0 if ok else 1.0, "failed_requests": float(m.get("failed") or 0)}
        for key, limit in self.evaluator.slos.items():
            constraints[key] = m[key] / limit - 1 if key in m else 1.0
        offered = row.offered_rate
        if offered:  # over capacity: the queue grows without bound, latencies mean nothing
            capacity = m.get("request_throughput", 0.0) if ok else 0.0
            constraints["keeps_up"] = offered / capacity - 1 if capacity > 0 else 1.0
        if self.objective == "pareto":
            latency = m.get(LATENCY, WORST_LATENCY_MS) if ok else WORST_LATENCY_MS
            return (throughput, latency), constraints
        return (throughput,), constraints

    def _refresh(self) -> None:
        """Take in the rows other processes serving the study have finished."""
        for row in self.store.new_rows():
            self.rows.setdefault(config_key(config_from_json(row.config)), row)

    # -- trials in flight (see the module docstring)

    def _flying_keys(self) -> set[str]:
        return {f.key for f in self._flying if f.job is not None}

    def _make_room(self) -> None:
        while len(self._flying) >= self.in_flight:
            self._commit()

    def drain(self) -> None:
        """Wait for every trial in flight and tell its result (failing them all if this is
        interrupted)."""
        try:
            while self._flying:
                self._commit()
        except BaseException:
            self._abandon()
            raise

    def _submit(self, trial: optuna.trial.Trial, config: ServingConfig, phase: str,
                knob: str | None) -> None:
        job = Job(config_to_json(config), self.evaluator.rate)
        flying = _InFlight(trial, config_key(config), phase, knob, job,
                           stop=self.store.beat(trial))
        self._flying.append(flying)
        prepared = self.evaluator.pop_prepared(config)
        if prepared is not None:  # --rate auto ran the baseline's whole evaluation already
            flying.future = Future()
            flying.future.set_result(prepared)
            return
        try:
            flying.future = self.executor.submit(job)  # local: runs it now
        except BaseException:
            self._abandon()
            raise

    def _commit(self) -> None:
        """Tell the oldest trial in flight (waiting for its result)."""
        flying = self._flying[0]
        if flying.job is None:  # a repeat: the configuration's row is in by now
            self._flying.popleft()
            known = self.rows[flying.key]
            values, constraints = self._values(known)
            self.store.tell(flying.trial, dataclasses.replace(known, duplicate_of=known.number),
                            values, constraints)
            return
        result = self._result(flying)
        self._flying.popleft()
        assert flying.stop is not None
        flying.stop(False)
        row = result.stored(flying.trial.number, flying.phase, flying.knob)
        values, constraints = self._values(row)
        self.store.tell(flying.trial, row, values, constraints)
        self.rows[flying.key] = row
        self.ran += 1
        if self.on_trial is not None:
            self.on_trial(row, self.best())

    def _result(self, flying: _InFlight) -> TrialResult:
        assert flying.job is not None and flying.future is not None
        while True:
            try:
                return flying.future.result()
            except WorkerLost as lost:
                if flying.tries >= TRIES:
                    return failed_row(flying.job, "crash",
                                      f"its worker was lost {TRIES} times (last: {lost})")
                flying.tries += 1
                flying.future = self.executor.submit(flying.job)

    def _abandon(self) -> None:
        """Fail every trial in flight (the study was interrupted or an error ends it)."""
        while self._flying:
            flying = self._flying.popleft()
            if flying.stop is not None:
                flying.stop(True)
            else:
                with suppress(Exception):
                    self.store.study.tell(flying.trial, state=TrialState.FAIL)

    def request(self, config: ServingConfig, phase: str, knob: str | None = None) -> bool:
        """Have ``config``'s row come: stored (by this process or another), in flight here, or
        asked for now; not waited for (``drain``). False when another process is running it
        (``evaluate`` waits for its row)."""
        key, labels = config_key(config), self.space.labels_of(config)
        while True:
            self._refresh()
            if key in self.rows or key in self._flying_keys():
                return True
            if self.store.running_elsewhere(labels):
                return False
            self._make_room()
            trial = self.store.ask(labels)
            if not self.store.asked_before(labels, trial.number):
                self._submit(trial, config, phase, knob)
                return True
            self.store.study.tell(trial, state=TrialState.FAIL)  # another process was first

    def evaluate(self, config: ServingConfig, phase: str, knob: str | None = None
                 ) -> TrialResult:
        """The row of ``config``: every trial in flight told, and where another process runs
        it, its row once it has finished (run here if it failed there)."""
        key, labels = config_key(config), self.space.labels_of(config)
        try:
            while not self.request(config, phase, knob):
                self.drain()
                while key not in self.rows and self.store.running_elsewhere(labels):
                    time.sleep(WAIT_FOR_OTHERS_S)
                    self._refresh()
            self.drain()
        except BaseException:
            self._abandon()
            raise
        return self.rows[config_key(config)]

    # -- strategies

    def run(self, strategy: str) -> None:
        """The strategy's trials, every one told by the end; the trials in flight are failed
        if it is interrupted."""
        try:
            if strategy in ("auto", "ofat"):
                self.run_ofat()
            if strategy in ("auto", "optuna"):
                self.run_optuna()
            if strategy == "grid":
                self.run_grid()
            if strategy == "rate":
                self.evaluate(self.baseline, "baseline")
            self.drain()
        except BaseException:
            self._abandon()
            raise

    def run_ofat(self) -> None:
        base = self.evaluate(self.baseline, "baseline")
        swept: dict[str, list[tuple[object, ServingConfig]]] = {}
        for dim in self.space.dimensions:
            current = getattr(self.baseline, dim.knob)
            swept[dim.knob] = []
            for value in dim.values:
                if value == current or self.exhausted():
                    continue
                config = self.baseline.replace(**{dim.knob: value})
                self.request(config, "ofat", dim.knob)
                swept[dim.knob].append((value, config))
        self.drain()
        sweeps = {knob: [(getattr(self.baseline, knob), base),  # others' trials waited for
                         *((v, self.evaluate(c, "ofat", knob)) for v, c in tried)]
                  for knob, tried in swept.items()}
        if self.exhausted():
            return
        best = {}
        for knob, tried in sweeps.items():
            fine = [(v, r) for v, r in tried if r in candidates([r])]
            if fine:
                best[knob] = max(fine, key=lambda vr: vr[1].throughput)[0]
        self.evaluate(self.baseline.replace(**best), "combined")

    def run_grid(self) -> None:
        """Every configuration of the space once, in the order Optuna's GridSampler (over the
        value labels, seeded) gives, until the budget ends or the grid is done.

        The grid sampler reads the storage and points at a grid point that no trial has
        finished or is running: processes serving one study split the grid between them
        instead of each walking its own order and waiting on the other's trials. It proposes
        the grid's trials only (``StudyStore.ask(sampler=...)``): the study's own sampler
        stays in place for the trials at fixed labels, which would otherwise take a grid
        point each, and for ``tell``, where GridSampler would call ``Study.stop`` (it raises
        outside ``Study.optimize``) once the grid is done. A point already stored (the
        baseline, a reverted configuration) is told again as a duplicate and runs nothing.
        A finished trial makes its point visited even when it failed on the way out
        (interrupted, its process lost, or yielded to another process's), so once the sampler
        has no point left (it would re-sample visited ones) the configurations the study
        still lacks run by their labels; the loop ends when the study holds every one."""
        dims, study = self.space.dimensions, self.store.study
        if self._grid is None:
            self._grid = optuna.samplers.GridSampler({d.knob: list(d.labels) for d in dims},
                                                    seed=self.seed)
        keyed = {config_key(config): config for config in (
            self.baseline.replace(**dict(zip((d.knob for d in dims), combo, strict=True)))
            for combo in itertools.product(*(d.values for d in dims)))}
        while not self.exhausted():
            self._refresh()
            flying = self._flying_keys()
            missing = [config for key, config in keyed.items()
                       if key not in self.rows and key not in flying]
            if not missing:
                if not self._flying:
                    return
                self._commit()  # what is in flight may yet fail: wait for the oldest
            elif self._grid.is_exhausted(study):
                self.request(missing[0], "grid")
            else:
                self._make_room()
                self._sampled(self.store.ask(sampler=self._grid), "grid")
        self.drain()

    def run_optuna(self) -> None:
        duplicates = 0
        while not self.exhausted() and duplicates < MAX_DUPLICATES_IN_A_ROW:
            self._make_room()
            duplicates = 0 if self._sampled(self.store.ask(), "optuna") else duplicates + 1
        self.drain()

    def _sampled(self, trial: optuna.trial.Trial, phase: str) -> bool:
        """Run the configuration the sampler's ``trial`` names, unless another process asked
        for it first (failed) or it is stored or in flight here (told as a duplicate, at once
        or in its turn: the sampler learns, nothing runs); True when it was submitted."""
        config = self.space.apply(self.baseline, trial.params)
        key = config_key(config)
        self._refresh()
        if key not in self.rows and key in self._flying_keys():
            self._flying.append(_InFlight(trial, key, phase, None))
            return False
        if key not in self.rows and self.store.asked_before(trial.params, trial.number):
            self.store.study.tell(trial, state=TrialState.FAIL)  # another process's
            return False
        if key in self.rows:
            known = self.rows[key]
            values, constraints = self._values(known)
            self.store.tell(trial, dataclasses.replace(known, duplicate_of=known.number),
                            values, constraints)
            return False
        self._submit(trial, config, phase, None)
        return True

    def ordered_rows(self) -> list[TrialResult]:
        return sorted(self.rows.values(), key=lambda r: r.number or 0)
