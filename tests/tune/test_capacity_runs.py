"""The capacity every goal speaks of does not depend on how long the run was."""

from __future__ import annotations

import dataclasses

import pytest

from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.backends.sim.simulator import simulate
from sweetspot.metrics.capacity import steady_state
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import ArrivalSpec
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.space import default_space
from sweetspot.tune.study import DRAFTS, batch_estimator, resolve_space_and_baseline


def _default_configs():
    """The default demo's hardware, model and workload; the baseline (vLLM's defaults) and
    every one-knob change of the default space."""
    version = parse_vllm_version("0.33.0")
    hardware = load_hardware("a100-80gb")
    resolved = load_model("Qwen/Qwen2.5-14B-Instruct-AWQ")  # the default demo's checkpoint
    quant = resolved.quantization or resolved.arch.default_quantization()
    workload = load_workload("chat")
    space = default_space(version, hardware, resolved.arch, workload,
                          draft=DRAFTS.get(resolved.arch.architecture))
    space, baseline = resolve_space_and_baseline(
        {d.knob: list(d.labels) for d in space.dimensions}, {}, ServingConfig(), version,
        hardware, resolved.arch, workload)
    configs = [baseline] + [baseline.replace(**{d.knob: v}) for d in space.dimensions
                            for v in d.values if v != getattr(baseline, d.knob)]
    setup = SimSetup(hardware, resolved.arch, quant, ServingConfig(), version)
    return setup, workload, configs


SETUP, WORKLOAD, CONFIGS = _default_configs()


@pytest.mark.parametrize("config", CONFIGS)
def test_doubling_the_capacity_run_moves_capacity_by_under_5_percent(config) -> None:
    evaluator = Evaluator(SimBackend(SETUP), WORKLOAD, 300, {}, vocab_size=32_000,
                          batch_estimate=batch_estimator(SETUP, WORKLOAD.prefix.length))
    requests, in_flight = evaluator.capacity_plan(config, seed=0)
    burst = dataclasses.replace(WORKLOAD, arrival=ArrivalSpec(process="inf"))
    doubled = sample_requests(burst, 2 * len(requests), seed=0, vocab_size=32_000)
    setup = dataclasses.replace(SETUP, config=config)
    runs = [simulate(setup, r, max_concurrency=in_flight) for r in (requests, doubled)]
    if runs[0].status != "ok":  # a configuration that cannot start has no capacity
        assert runs[1].status == runs[0].status
        return
    figures = []
    for run in runs:
        duration = max(r.end_s for r in run.records)
        steady = steady_state(run.records, duration)
        assert steady.saturated, (len(run.records), steady)
        figures.append(steady.output_throughput)
    assert figures[1] == pytest.approx(figures[0], rel=0.05)
