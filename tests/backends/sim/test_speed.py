"""Each simulated server's own speed (``SimBackend(speed_spread=…)``): drawn from the seed, off
unless asked for, so tune's trials keep the model's exact speed."""

from __future__ import annotations

import numpy as np
import pytest

from sweetspot.backends.base import Target, backend_for
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import validate_workload

SETUP = SimSetup(load_hardware("a100-80gb"), load_model("qwen2.5-7b").arch,
                 load_quantization("bf16"), ServingConfig(max_num_seqs=16),
                 parse_vllm_version("0.32.0"))


def _requests():
    wl = validate_workload({"name": "fixed", "prompt": {"kind": "fixed", "value": 128},
                            "output": {"kind": "fixed", "value": 64},
                            "arrival": {"process": "inf"}}, "test")
    return sample_requests(wl, 64, seed=0, vocab_size=32_000)


def _throughput(backend: SimBackend) -> float:
    with backend.serve(ServingConfig(max_num_seqs=16)) as server:
        run = server.run(_requests(), LoadConfig(base_url="", model=""))
    assert run is not None
    return compute_result(run.records, duration_s=run.duration_s).output_throughput


def test_without_a_spread_every_server_runs_at_the_model_s_speed():
    backend = backend_for("sim", Target(SETUP, "qwen2.5-7b", ServingConfig()))
    assert isinstance(backend, SimBackend) and backend.speed_spread == 0.0
    first, second = _throughput(backend), _throughput(backend)
    assert first == second


def test_with_a_spread_each_server_draws_its_own_speed_from_the_seed():
    spread = backend_for("sim", Target(SETUP, "qwen2.5-7b", ServingConfig(),
                                       options={"speed_spread": 0.05}, seed=3))
    assert isinstance(spread, SimBackend)
    drawn = [_throughput(spread) for _ in range(3)]
    assert len(set(drawn)) == 3
    again = SimBackend(SETUP, seed=3, speed_spread=0.05)
    assert [_throughput(again) for _ in range(3)] == drawn
    exact = _throughput(SimBackend(SETUP))
    # every step slower or faster by the factor: the run's rate moves by about as much
    assert all(0.8 < t / exact < 1.25 for t in drawn)


@pytest.mark.parametrize("spread", [0.03, 0.1])
def test_the_drawn_speeds_have_the_spread_asked_for(spread):
    def draws(seed: int) -> list[float]:
        backend = SimBackend(SETUP, seed=seed, speed_spread=spread)
        return [backend._step_factor() for _ in range(400)]

    first = draws(3)
    assert first == draws(3) and first != draws(4)
    assert np.std(np.log(first)) == pytest.approx(spread, rel=0.15)
    assert abs(np.mean(np.log(first))) < 3 * spread / np.sqrt(400)
