"""Predictions that know their uncertainty: an interval for every simulated metric, and flags
where a prediction is fragile.

The simulator's error is mostly its step time: a cost model a few per cent to a few tens of
per cent off, depending on what stands behind it (``step_uncertainty``): a calibration file of
the user's own server (its fit's residuals), a GPU and model shape that published or our own
measurements cover (the public cases' median error, ~12 %), or the catalog alone (twice that).
An interval is what the run gives with every step that much faster and slower — not a fixed
band: at a knee a 12 % slower server queues, and the latency interval opens accordingly.
Where every request arrives at once the run's clock simply scales with its steps, so the
interval follows without simulating again; otherwise both runs are simulated.

Flags (``Flag``): the offered rate within 10 % of the capacity (``knee``) or past it
(``over-capacity``), a KV cache over-subscribed (``kv-oversubscribed``: preemptions, which
cost real servers more than the mirror charges), a closed loop of equal outputs and long
prompts (``convoy``: requests move in waves, and TTFT depends on how vLLM staggers them),
a calibrated run beyond the batch or step sizes its calibration saw
(``outside-calibration``), and a GPU and model shape with no measurement behind it
(``unmeasured``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import numpy as np

from sweetspot.backends.sim.cost import StepTimeModel
from sweetspot.backends.sim.simulator import SimRun, SimSetup, simulate
from sweetspot.metrics.capacity import steady_state
from sweetspot.metrics.serve import BenchResult, compute_result
from sweetspot.spec.model import load_model, model_fingerprint
from sweetspot.spec.requests import Request

__all__ = ["Flag", "Prediction", "StepUncertainty", "predict", "step_uncertainty"]

MEASURED_PAIR_UNCERTAINTY = 0.12  # public cases: median |error| of throughputs (RESULTS.md)
UNMEASURED_UNCERTAINTY = 0.25
CALIBRATED_FLOOR, CALIBRATED_DEFAULT = 0.03, 0.05
KNEE = 0.10  # offered rate within this share of the capacity
CAPACITY_REQUESTS = 2000  # the capacity run: the first requests, all at once
# GPU and model shapes with measurements behind them: the public cases' (testing/public_cases,
# a test keeps this list in step with them) and our own (benchmarks/gpu: H200 and H100, a
# Qwen2.5-7B-shaped dummy model, vLLM 0.24).
MEASURED = (("h100", "llama-3-8b"), ("a100-80gb", "llama-3-8b"), ("h100", "llama-3.1-8b"),
            ("h100", "mistral-7b"), ("a100-80gb", "mistral-7b"), ("a100-80gb", "qwen2-7b"),
            ("h100", "qwen3-14b"), ("h200", "qwen2.5-7b"), ("h100", "qwen2.5-7b"))
_RATES = ("request_throughput", "output_throughput", "total_token_throughput",
          "request_goodput", "max_output_tokens_per_s")


@dataclass(frozen=True, slots=True)
class StepUncertainty:
    relative: float  # step times may be this share faster or slower
    basis: str  # what stands behind the cost model, in words
    source: Literal["calibrated", "measured", "catalog"] = "catalog"


@dataclass(frozen=True, slots=True)
class Flag:
    code: str  # "knee", "over-capacity", "kv-oversubscribed", "convoy", ...
    message: str


@dataclass(frozen=True, slots=True)
class Prediction:
    run: SimRun
    result: BenchResult
    intervals: dict[str, tuple[float, float]]  # metric -> (low, high), BenchResult keys
    flags: tuple[Flag, ...]
    uncertainty: StepUncertainty
    capacity_rps: float | None = None  # requests/s at saturation (rate-limited runs)

    def to_dict(self) -> dict[str, Any]:
        return {"intervals": {k: [lo, hi] for k, (lo, hi) in self.intervals.items()},
                "flags": [dataclasses.asdict(f) for f in self.flags],
                "uncertainty": {"step_relative": self.uncertainty.relative,
                                "basis": self.uncertainty.basis,
                                "capacity_rps": self.capacity_rps}}


@cache
def _measured_shapes() -> frozenset[tuple[str, tuple[int, ...]]]:
    """(GPU, model shape) pairs with measurements behind them."""
    return frozenset((gpu, tuple(model_fingerprint(load_model(model).arch).values()))
                     for gpu, model in MEASURED)


def step_uncertainty(setup: SimSetup, fitted_on: Sequence[Mapping[str, Any]] | None = None
                     ) -> StepUncertainty:
    """How far the step times may be off. ``fitted_on``: a calibration's fit rows (measured
    and predicted per statistic), None for the catalog's roofline."""
    if fitted_on is not None:
        errors = [abs(float(r["predicted"]) / float(r["measured"]) - 1) for r in fitted_on
                  if float(r.get("measured") or 0) > 0]
        relative = (max(CALIBRATED_FLOOR, min(statistics.median(errors), 0.25)) if errors
                    else CALIBRATED_DEFAULT)
        return StepUncertainty(relative, "calibrated on this server", "calibrated")
    shape = tuple(model_fingerprint(setup.arch).values())
    if (setup.hardware.name, shape) in _measured_shapes():
        return StepUncertainty(MEASURED_PAIR_UNCERTAINTY,
                               f"roofline; {setup.hardware.name} with this model shape measured",
                               "measured")
    return StepUncertainty(UNMEASURED_UNCERTAINTY,
                           f"roofline; no measurement of {setup.hardware.name} with this model "
                           "shape")


def predict(setup: SimSetup, requests: Sequence[Request], *, max_concurrency: int | None = None,
            model: StepTimeModel | None = None, seed: int = 0, warmup: int = 1,
            fitted_on: Sequence[Mapping[str, Any]] | None = None,
            covered: Mapping[str, float] | None = None,
            offered_rate: float | None = None) -> Prediction:
    """Simulate ``requests`` on ``setup`` (as ``simulate`` does) with intervals and flags.
    ``fitted_on``/``covered``: the calibration's fit rows and the step sizes it saw, where
    ``model`` is a calibrated one; ``offered_rate``: the arrival process's rate (req/s; by
    default the requests' own)."""
    uncertainty = step_uncertainty(setup, fitted_on if model is not None else None)
    run = simulate(setup, requests, max_concurrency=max_concurrency, model=model, seed=seed,
                   warmup=warmup)
    if run.status != "ok":
        return Prediction(run, compute_result(()), {}, (), uncertainty)
    result = compute_result(run.records)
    base = result.to_dict()
    u = uncertainty.relative
    at_once = max_concurrency is None and all(r.arrival_s == 0 for r in requests)
    if at_once:  # the clock scales with the steps (the front end aside)
        variants = [_scaled(base, f) for f in (1 / (1 + u), 1 + u)]
    else:
        variants = [compute_result(simulate(setup, requests, max_concurrency=max_concurrency,
                                            model=model, seed=seed, warmup=warmup,
                                            step_factor=f).records).to_dict()
                    for f in (1 / (1 + u), 1 + u)]
    intervals = _intervals(base, variants)
    capacity = None
    if not at_once and max_concurrency is None:
        capacity = _capacity(setup, requests, model, seed)
    flags = _flags(setup, requests, run, max_concurrency, capacity, covered, uncertainty,
                   offered_rate or _offered_rate(requests))
    return Prediction(run, result, intervals, flags, uncertainty, capacity)


def _scaled(values: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """A run's numbers with every step ``factor`` times as long and the same schedule."""
    return {key: value / factor if key in _RATES else value * factor
            for key, value in values.items() if _has_interval(key, value)}


def _has_interval(key: str, value: Any) -> bool:
    """A rate or a time of the run (not a count, not the client's own lag)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and "client_lag" not in key
            and (key in _RATES or key.endswith("_ms") or key == "duration"))


def _intervals(base: Mapping[str, Any], variants: Sequence[Mapping[str, Any]]
               ) -> dict[str, tuple[float, float]]:
    out = {}
    for key, value in base.items():
        if _has_interval(key, value):
            values = [float(value)] + [float(v[key]) for v in variants if key in v]
            out[key] = (min(values), max(values))
    return out


def _capacity(setup: SimSetup, requests: Sequence[Request], model: StepTimeModel | None,
              seed: int) -> float | None:
    """Requests/s the configuration serves at saturation: the steady state of the first
    requests sent at once."""
    head = [dataclasses.replace(r, arrival_s=0.0) for r in requests[:CAPACITY_REQUESTS]]
    run = simulate(setup, head, model=model, seed=seed)
    if run.status != "ok":
        return None
    ends = [r.end_s for r in run.records if r.end_s is not None]
    return steady_state(run.records, max(ends, default=0.0)).request_throughput or None


def _offered_rate(requests: Sequence[Request]) -> float | None:
    times = sorted(r.arrival_s for r in requests)
    span = times[-1] - times[0] if times else 0.0
    return (len(times) - 1) / span if span > 0 else None


def _flags(setup: SimSetup, requests: Sequence[Request], run: SimRun,
           max_concurrency: int | None, capacity: float | None,
           covered: Mapping[str, float] | None, uncertainty: StepUncertainty,
           offered: float | None) -> tuple[Flag, ...]:
    flags = []
    facts = run.facts
    if capacity and offered:
        share = offered / capacity
        if share >= 1:
            flags.append(Flag("over-capacity", f"the offered rate ({offered:.3g} req/s) is past "
                              f"the predicted capacity ({capacity:.3g} req/s): queues and "
                              "latencies grow with the run's length"))
        elif share >= 1 - KNEE:
            flags.append(Flag("knee", f"the offered rate ({offered:.3g} req/s) is within "
                              f"{1 - share:.0%} of the predicted capacity ({capacity:.3g} "
                              "req/s): latencies swing with small changes of rate or speed"))
    if facts is not None and facts.preemptions:
        flags.append(Flag("kv-oversubscribed", f"the KV cache is over-subscribed "
                          f"({facts.preemptions} preemptions): real servers lose more to "
                          "recompute and scheduling than the simulator charges"))
    outputs = np.array([r.output_tokens for r in requests], dtype=float)
    prompts = np.array([r.prompt_tokens for r in requests], dtype=float)
    budget = run.config.max_num_batched_tokens or 0
    if (max_concurrency is not None and len(outputs) > 1 and outputs.mean() > 0
            and outputs.std() < 0.1 * outputs.mean() and budget
            and prompts.mean() >= budget / 2):
        flags.append(Flag("convoy", "a closed loop of equal output lengths and long prompts "
                          "(each at least half a step's token budget): requests move in waves "
                          "and TTFT depends on how vLLM staggers them"))
    if covered and facts is not None:
        beyond = [f"{name} {value:,}" for name, value, limit in (
            ("batch", facts.max_batch, covered.get("max_batch")),
            ("step tokens", facts.max_step_tokens, covered.get("max_step_tokens")))
            if limit and value > 1.25 * limit]
        if beyond:
            flags.append(Flag("outside-calibration", "beyond what the calibration measured ("
                              + ", ".join(beyond) + "): its coefficients extrapolate"))
    if uncertainty.source == "catalog":
        flags.append(Flag("unmeasured", f"no measurement of {setup.hardware.name} with this "
                          "model's shape stands behind the roofline: intervals are twice as "
                          "wide"))
    return tuple(flags)
