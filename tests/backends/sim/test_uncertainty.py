"""Intervals and flags of a prediction (``backends/sim/uncertainty.py``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from packaging.version import Version

from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.cost import LinearStepModel
from sweetspot.backends.sim.uncertainty import (
    MEASURED_PAIR_UNCERTAINTY,
    UNMEASURED_UNCERTAINTY,
    predict,
    step_uncertainty,
)
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload
from sweetspot.testing.public_cases import sharegpt_like
from tests.conftest import run_cli

ARCH = load_model("llama-3.1-8b").arch


def setup(gpu: str = "h100", model: str = "llama-3.1-8b", **config) -> SimSetup:
    arch = load_model(model).arch
    return SimSetup(load_hardware(gpu), arch, arch.default_quantization(),
                    ServingConfig(**config), Version("0.24.0"))


def sharegpt(n: int, rate: float | None = None):
    return sample_requests(sharegpt_like(200, 180, rate=rate), n, seed=0, vocab_size=32000)


def flags_of(prediction) -> set[str]:
    return {f.code for f in prediction.flags}


def test_the_measured_pairs_hold_every_public_case() -> None:
    from sweetspot.backends.sim.uncertainty import MEASURED
    from sweetspot.testing.public_cases import CASES

    assert {(c.gpu, c.model) for c in CASES} <= set(MEASURED)


def test_the_basis_sets_the_width() -> None:
    assert step_uncertainty(setup()).relative == MEASURED_PAIR_UNCERTAINTY  # P8, P3: measured
    unmeasured = step_uncertainty(setup("l4", "qwen2.5-0.5b"))
    assert unmeasured.relative == UNMEASURED_UNCERTAINTY and "no measurement" in unmeasured.basis
    rows = [{"measured": 10.0, "predicted": 10.4}, {"measured": 20.0, "predicted": 19.0},
            {"measured": 5.0, "predicted": 5.3}]
    assert step_uncertainty(setup(), rows).relative == pytest.approx(0.05)  # median |error|
    assert step_uncertainty(setup(), rows[:1] * 3).relative == pytest.approx(0.04)


def test_a_burst_scales_with_its_steps() -> None:
    """All requests at once: the interval is the run at steps 12 % faster and slower."""
    p = predict(setup(), sharegpt(300))
    base, u = p.result.to_dict(), MEASURED_PAIR_UNCERTAINTY
    assert p.intervals["output_throughput"] == pytest.approx(
        (base["output_throughput"] / (1 + u), base["output_throughput"] * (1 + u)))
    assert p.intervals["median_tpot_ms"] == pytest.approx(
        (base["median_tpot_ms"] / (1 + u), base["median_tpot_ms"] * (1 + u)))
    assert not p.flags and p.capacity_rps is None


def test_the_knee_opens_the_latency_interval_and_is_flagged() -> None:
    """64 sequences: near capacity requests wait for a slot, and a 12 % slower server waits
    far longer (a default 1,024-sequence server absorbs the load in its batch instead)."""
    config = setup(max_num_seqs=64)
    capacity = predict(config, sharegpt(600, rate=5)).capacity_rps
    assert capacity is not None and 25 < capacity < 60
    light, knee, past = (predict(config, sharegpt(600, rate=share * capacity),
                                 offered_rate=share * capacity) for share in (0.5, 0.95, 1.5))
    assert flags_of(light) == set() and flags_of(knee) == {"knee"}
    assert flags_of(past) == {"over-capacity"}

    def width(p, key: str) -> float:
        low, high = p.intervals[key]
        return high / low

    # Light load: the steps' ±12 % and little more; at the knee the tail swings much more.
    assert width(light, "median_tpot_ms") < 1.35
    assert width(knee, "p99_ttft_ms") > 2 * width(light, "p99_ttft_ms")
    for p in (light, knee, past):
        for key, (low, high) in p.intervals.items():
            assert low <= p.result.to_dict()[key] <= high, key


def test_kv_over_subscription_and_convoys_are_flagged() -> None:
    small = setup(max_model_len=4096, kv_cache_memory_bytes=6000 * ARCH.kv_bytes_per_token())
    assert "kv-oversubscribed" in flags_of(predict(small, sharegpt(200)))
    long = validate_workload({"name": "long", "prompt": {"kind": "fixed", "value": 6000},
                              "output": {"kind": "fixed", "value": 100},
                              "arrival": {"process": "inf"}}, "test")
    requests = sample_requests(long, 24, seed=0, vocab_size=32000)
    assert "convoy" in flags_of(predict(setup(), requests, max_concurrency=8))
    assert "convoy" not in flags_of(predict(setup(), requests))  # no closed loop


def test_a_calibration_is_trusted_within_what_it_measured() -> None:
    cal = LinearStepModel((0.010, 0.0002, 0.00001, 0.0), 0.004)
    rows = [{"measured": 1.0, "predicted": 1.03}]
    inside = predict(setup(), sharegpt(100), model=cal, fitted_on=rows,
                     covered={"max_batch": 512, "max_step_tokens": 16384})
    assert inside.uncertainty.relative == pytest.approx(0.03) and not inside.flags
    beyond = predict(setup(), sharegpt(100), model=cal, fitted_on=rows,
                     covered={"max_batch": 16, "max_step_tokens": 16384})
    assert flags_of(beyond) == {"outside-calibration"}
    assert "batch" in beyond.flags[0].message


def test_simulate_prints_and_writes_intervals_and_flags(tmp_path) -> None:
    out = tmp_path / "sim.json"
    result = run_cli("simulate", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--num-requests",
                     "200", "--rate", "500", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "Prediction intervals (steps ±25%" in result.stdout
    assert "flag over-capacity:" in result.stdout and "flag unmeasured:" in result.stdout
    data = json.loads(out.read_text())
    assert {f["code"] for f in data["flags"]} == {"over-capacity", "unmeasured"}
    for key in ("output_throughput", "request_throughput", "p99_ttft_ms", "median_tpot_ms",
                "mean_itl_ms", "p90_e2el_ms"):
        low, high = data["intervals"][key]
        assert low <= data[key] <= high and low < high, key
    assert data["uncertainty"]["step_relative"] == UNMEASURED_UNCERTAINTY


def test_the_interval_holds_the_same_run_with_a_seeded_speed() -> None:
    """A server 10 % slower than the model (inside the ±12 %): every metric of its run lies
    in the interval."""
    requests = sharegpt(400, rate=15)
    p = predict(setup(), requests)
    from sweetspot.backends.sim import simulate
    from sweetspot.metrics.serve import compute_result

    slower = compute_result(simulate(dataclasses.replace(setup()), requests,
                                     step_factor=1.10).records).to_dict()
    for key in ("output_throughput", "median_ttft_ms", "median_tpot_ms", "p99_e2el_ms"):
        low, high = p.intervals[key]
        assert low * 0.999 <= slower[key] <= high * 1.001, key
