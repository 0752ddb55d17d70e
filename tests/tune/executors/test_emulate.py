"""--emulate-gpus: a real trial's modelled wall time, and a study planned on emulated GPUs on a
Ray that the study starts here (its makespan never below the ideal, its holds packed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweetspot.tune.evaluate import CAPACITY_TURNOVERS, MEASURED_TURNOVERS
from sweetspot.tune.executors import Execution
from sweetspot.tune.executors.emulate import (
    LOAD_BYTES_PER_S,
    PARALLEL_GROUP_S,
    STARTUP_S,
    trial_seconds,
)
from tests.tune.executors.conftest import one_ray_at_a_time, tune_settings_of

pytest.importorskip("ray")

GB = 10**9


def test_a_real_trial_is_start_up_load_and_runs_at_real_length() -> None:
    row = {"facts": {"capacity_duration_s": 10.0, "traffic_duration_s": 30.0}}
    one = trial_seconds(row, 16 * GB, 1)
    assert one == pytest.approx(STARTUP_S + 16 * GB / LOAD_BYTES_PER_S
                                + 10.0 * MEASURED_TURNOVERS / CAPACITY_TURNOVERS + 30.0)
    # two GPUs load half the weights each, at once, and start a parallel group
    two = trial_seconds(row, 16 * GB, 2)
    assert two - one == pytest.approx(PARALLEL_GROUP_S - 8 * GB / LOAD_BYTES_PER_S)


def test_a_planned_study_reports_its_makespan_beside_the_ideal(tmp_path: Path) -> None:
    from sweetspot.tune.study import run_study

    settings = tune_settings_of(model="qwen2.5-0.5b", gpu="l4", workload="short",
                                num_requests=64, confirm=0, trials=12, strategy="grid",
                                study_name="plan").study
    with one_ray_at_a_time():  # Ray starts here for the study, and stops with it
        data = run_study(settings, f"sqlite:///{tmp_path / 'p.db'}", resume=False,
                         execution=Execution("ray", emulate_gpus=3, emulate_speedup=500))
    plan = data.emulation
    assert plan is not None and plan["gpus"] == 3
    search = plan["search"]
    assert search["trials"] == 12  # a grid keeps no reserve for reverted configurations
    assert plan["trials"] >= search["trials"]
    for phase in (plan, search):
        assert phase["gpu_seconds"] >= STARTUP_S * phase["trials"]
        assert phase["makespan_s"] >= phase["ideal_s"] * 0.98  # no faster than the ideal
        assert phase["ideal_s"] == pytest.approx(phase["gpu_seconds"] / 3, abs=0.1)
    emulated = [t.facts.get("emulated_s") for t in data.trials]
    assert all(s is not None and s >= STARTUP_S for s in emulated)
    # the ideal counts GPU time: each trial's hold asked for its configuration's GPUs
    from sweetspot.tune.executors.ray import gpus_of
    assert all(t.facts.get("emulated_gpus") == gpus_of(dict(t.config)) for t in data.trials)
    assert plan["overrun_s"] >= 0
