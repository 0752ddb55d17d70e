"""Fitting a calibrated step-time model (``LinearStepModel``) to measured runs.

A run's duration, its requests' TPOTs and TTFTs are sums of the durations of the steps they span,
and every step's duration is linear in the coefficients (``cost.features``). So, for a fixed
simulated trajectory (which steps ran, with which shapes, which request spans which steps), each
measured statistic is one linear equation in the coefficients:

- duration of a saturated run  = sum of all step durations + the front end's latency once
  per idle gap (a closed loop waits one round trip between requests) and once overall;
- mean TPOT  = mean over requests of (sum of durations of its decode steps) / (tokens - 1);
- median TPOT = the same for the request whose simulated TPOT is the median;
- mean TTFT  = mean over requests of (the rest of the step running when it arrived + the
  durations up to its first token's step) + the front end's latency.

The trajectory itself depends on the coefficients (batches form differently when steps are
slower), so fitting alternates: simulate with the current model, solve the equations, repeat
until the coefficients settle.

The solve is robust least squares on log(predicted / measured), with non-negative coefficients
(scipy's ``least_squares``, soft-L1 loss beyond ~10 %). Log errors are symmetric: an over-
prediction of 5x costs what an under-prediction of 5x does. A plain relative error
(predicted / measured - 1) is not: under-predicting costs at most 1 while over-predicting is
unbounded, so one statistic measured far too low (a stream delivered in bunches to a client or
API server starved of CPU measures a tiny TPOT) dragged every coefficient towards zero and the
whole calibration with it (seen in CI). The soft-L1 loss lets such a row count like any other
large error instead of quadratically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sweetspot._errors import SweetspotError
from sweetspot.backends.sim.cost import LinearStepModel, StepTimeModel, features
from sweetspot.backends.sim.simulator import SimRun
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request

__all__ = ["FIT_METRICS", "FitReport", "Observation", "fit_step_model"]

FIT_METRICS = ("duration", "mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms")
_MAX_ITERATIONS = 12
_MIN_MEASURED_S = 1e-5  # 10 µs: below, a statistic measured nothing
_TOLERANCE = 0.002
_DAMPING = 0.5  # relative change of every coefficient that ends the iteration
_ROBUST_SCALE = 0.1  # log error (~10 %) beyond which a statistic counts linearly, not squared


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured run: the requests as sent, and what was measured (``FIT_METRICS`` keys;
    duration in seconds, latencies in ms as ``vllm bench serve`` writes them)."""

    label: str
    requests: tuple[Request, ...]
    max_concurrency: int | None
    measured: dict[str, float]
    saturated: bool  # every request sent at t=0 (rate inf / closed loop): duration is informative
    # The server's settings in this run when runs differ (a study's trials); None: every run
    # had the one configuration the caller simulates.
    config: ServingConfig | None = None


@dataclass(frozen=True, slots=True)
class FitReport:
    model: LinearStepModel
    iterations: int
    rows: tuple[tuple[str, str, float, float], ...]  # (run, metric, measured, predicted)
    covered: dict[str, float] | None = None  # the largest steps simulated: max_batch, ...


# Simulates one observation's run (its requests, concurrency limit and, where it has one, its
# configuration) with a step model, ``trace=True``.
Simulate = Callable[[Observation, StepTimeModel], SimRun]


def _rows(run: SimRun, obs: Observation, half: float) -> list[tuple[str, np.ndarray, float]]:
    """(metric, coefficients row incl. the latency column, measured value in s)."""
    trace = run.trace
    if trace is None or not len(trace.duration_s):
        raise SweetspotError(f"run {obs.label!r}: the simulation ran no step")
    x = np.asarray([features(s) for s in trace.shapes])  # steps x features
    ends = trace.start_s + trace.duration_s
    cum = np.vstack([np.zeros(x.shape[1]), np.cumsum(x, axis=0)])  # cum[i] = sum of x[:i]
    ok = [r for r in run.records if r.ok]  # token times are step ends + half the latency

    def step_of(t: float) -> int:
        return int(np.clip(np.searchsorted(ends, t - half - 1e-9), 0, len(ends) - 1))

    rows: list[tuple[str, np.ndarray, float]] = []
    m = obs.measured
    if obs.saturated and "duration" in m:
        # Idle gaps of a saturated run are front-end round trips (a closed loop of one waits
        # one latency between requests); the run's end adds half of one, its start another.
        gaps = int(np.count_nonzero(trace.start_s[1:] > ends[:-1] + 1e-9))
        rows.append(("duration", np.append(cum[-1], 1.0 + gaps), m["duration"]))
    tpot_rows, tpots = [], []
    for r in ok:
        if r.output_tokens > 1:
            first, last = step_of(r.chunk_times_s[0]), step_of(r.chunk_times_s[-1])
            tpot_rows.append((cum[last + 1] - cum[first + 1]) / (r.output_tokens - 1))
            tpots.append(r.tpot_s)
    if tpot_rows and "mean_tpot_ms" in m:
        rows.append(("mean_tpot_ms", np.append(np.mean(tpot_rows, axis=0), 0.0),
                     m["mean_tpot_ms"] / 1000))
    if tpot_rows and "median_tpot_ms" in m:
        median = int(np.argsort(tpots)[len(tpots) // 2])
        rows.append(("median_tpot_ms", np.append(tpot_rows[median], 0.0),
                     m["median_tpot_ms"] / 1000))
    if ok and "mean_ttft_ms" in m:
        ttft_rows = []
        for r in ok:
            arrival = r.sent_s + half
            first = step_of(r.chunk_times_s[0])
            began = int(np.searchsorted(trace.start_s, arrival - 1e-12))  # first step after
            row = cum[first + 1] - cum[min(began, first)]
            if 0 < began <= first and ends[began - 1] > arrival:  # rest of the running step
                frac = (ends[began - 1] - arrival) / trace.duration_s[began - 1]
                row = row + frac * x[began - 1]
            ttft_rows.append(np.append(row, 1.0))
        rows.append(("mean_ttft_ms", np.mean(ttft_rows, axis=0), m["mean_ttft_ms"] / 1000))
    # A statistic measured as zero is no measurement of step time (a starved API server can
    # deliver a whole stream in one chunk: TPOT 0) and, as a relative error, would weigh
    # infinitely: such rows are left out.
    return [r for r in rows if math.isfinite(r[2]) and r[2] > _MIN_MEASURED_S]


def _solve(a: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` with ``a @ c`` (predicted / measured per statistic) close to 1 in
    log terms, robustly (see the module docstring)."""
    from scipy.optimize import least_squares, nnls  # 0.3 s to import: only where fitting

    scale = np.maximum(np.abs(a).max(axis=0), 1e-12)  # comparable column magnitudes
    scaled = a / scale
    start = nnls(scaled, np.ones(len(a)))[0]  # least squares on relative errors: a start
    start = np.maximum(start, 1e-6 * max(float(start.max()), 1e-6))  # strictly feasible

    def ratio(z: np.ndarray) -> np.ndarray:
        return np.maximum(scaled @ z, 1e-9)

    fitted = least_squares(lambda z: np.log(ratio(z)), start,
                           jac=lambda z: scaled / ratio(z)[:, None], bounds=(0.0, np.inf),
                           loss="soft_l1", f_scale=_ROBUST_SCALE, method="trf")
    return fitted.x / scale


def fit_step_model(observations: Sequence[Observation], simulate_run: Simulate,
                   start: StepTimeModel) -> FitReport:
    """Fit a ``LinearStepModel`` to ``observations``. ``simulate_run(observation, model)``
    simulates one run (``Simulate``); ``start`` is the first trajectory's model."""
    if not observations:
        raise SweetspotError("calibration needs at least one measured run")
    model: StepTimeModel = start
    previous: np.ndarray | None = None
    iterations = 0
    for iterations in range(1, _MAX_ITERATIONS + 1):  # noqa: B007 (reported below)
        equations = []
        for obs in observations:
            run = simulate_run(obs, model)
            equations += _rows(run, obs, model.request_latency_s / 2)
        if len(equations) < 2:
            raise SweetspotError("the measured runs give too few statistics to calibrate on")
        a = np.asarray([row / value for _, row, value in equations])
        solution = _solve(a)
        if previous is not None:  # damped: the trajectory reacts to the coefficients
            solution = _DAMPING * solution + (1 - _DAMPING) * previous
        model = LinearStepModel(tuple(float(v) for v in solution[:-1]), float(solution[-1]))
        if previous is not None and np.all(
                np.abs(solution - previous) <= _TOLERANCE * np.maximum(np.abs(previous), 1e-9)):
            break
        previous = solution
    rows = []
    covered = {"max_batch": 0.0, "max_step_tokens": 0.0}
    for obs in observations:
        run = simulate_run(obs, model)
        if run.facts is not None:
            covered["max_batch"] = max(covered["max_batch"], run.facts.max_batch)
            covered["max_step_tokens"] = max(covered["max_step_tokens"],
                                             run.facts.max_step_tokens)
        for metric, row, value in _rows(run, obs, model.request_latency_s / 2):
            scale = 1.0 if metric == "duration" else 1000.0
            rows.append((obs.label, metric, value * scale, float(row @ np.append(
                model.coefficients, model.request_latency_s)) * scale))
    return FitReport(model, iterations, tuple(rows), covered)

