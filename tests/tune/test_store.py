"""The study store shared by several processes: two `tune` processes on one SQLite file,
heartbeats that tell a dead process's trial from a live one, and stored settings read strictly."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweetspot._errors import SweetspotError
from sweetspot.tune import store as store_module
from sweetspot.tune.settings import StudySettings
from sweetspot.tune.space import Dimension, SearchSpace
from sweetspot.tune.store import StudyStore
from tests.conftest import run_cli

SPACE = SearchSpace((Dimension("max_num_seqs", (16, 32, 64)),
                     Dimension("enable_prefix_caching", (False, True))))


def test_two_tune_processes_serve_one_study(tmp_path: Path) -> None:
    """The same `tune` command started twice at once on one SQLite file: both exit 0, each runs
    its own 30 trials, and the study holds 60 configurations, none twice."""
    command = [sys.executable, "-m", "sweetspot.cli", "tune", "--storage", "sqlite:///x.db",
               "--study-name", "s", "--trials", "30"]
    processes = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (out, err) in zip(processes, outputs, strict=True):
        assert p.returncode == 0, err + out
        assert "warning" not in err  # Optuna's experimental-feature notes stay quiet
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'x.db'}")
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    rows = [t.user_attrs["row"] for t in study.get_trials(states=(TrialState.COMPLETE,))
            if t.user_attrs["row"].get("duplicate_of") is None]
    configurations = {json.dumps(r["config"], sort_keys=True) for r in rows}
    assert len(rows) == len(configurations) == 60
    assert len({r["number"] for r in rows}) == 60


def test_a_second_tune_with_other_settings_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    small = ("--model", "qwen2.5-0.5b", "--quant", "bf16", "--gpu", "a100-80gb", "--workload",
             "short", "--num-requests", "24", "--vllm-version", "0.33.0", "--storage", url,
             "--study-name", "s", "--report-dir", str(tmp_path / "r"))
    first = run_cli("tune", *small, "--trials", "2", "--confirm", "0")
    assert first.returncode == 0, first.stderr
    other = run_cli("tune", *small, "--trials", "2", "--confirm", "1")
    assert other.returncode == 2
    assert other.stderr.strip().splitlines()[-1] == (
        f"error: study 's' already exists in {url} with other settings (confirm_repeats: 0, "
        "here 1): add --resume to continue it as it was started, or give another --study-name")


def test_a_dead_process_trial_goes_stale_and_a_live_one_does_not(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """A trial whose process stops beating is failed once the grace period has passed, by
    whichever process looks next; a trial still beating is left running, and another process
    sees it running (and waits for it rather than run the configuration again)."""
    monkeypatch.setattr(store_module, "HEARTBEAT_S", 1)
    monkeypatch.setattr(store_module, "GRACE_S", 2)
    url = f"sqlite:///{tmp_path / 's.db'}"
    ours = StudyStore.open(url, "s", SPACE, resume=False)
    dead = ours.ask({"max_num_seqs": "16", "enable_prefix_caching": "false"})  # never runs
    live = ours.ask({"max_num_seqs": "32", "enable_prefix_caching": "false"})
    release = threading.Event()

    def run_live() -> None:
        with ours.running(live):
            release.wait(10)

    runner = threading.Thread(target=run_live)
    runner.start()
    try:
        other = StudyStore.open(url, "s", SPACE, resume=True)
        assert other.running_elsewhere({"max_num_seqs": "16", "enable_prefix_caching": "false"})
        time.sleep(3.5)  # past the grace: the dead one's only beat was at its ask
        assert other.running_elsewhere({"max_num_seqs": "32", "enable_prefix_caching": "false"})
        assert not other.running_elsewhere({"max_num_seqs": "16",
                                             "enable_prefix_caching": "false"})
        states = {t.number: t.state for t in other.study.get_trials()}
        assert states == {dead.number: TrialState.FAIL, live.number: TrialState.RUNNING}
        assert not ours.running_elsewhere({"max_num_seqs": "32",
                                           "enable_prefix_caching": "false"})  # its own
    finally:
        release.set()
        runner.join()


def test_an_interrupted_trial_is_failed_on_the_way_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = StudyStore.open(url, "s", SPACE, resume=False)
    trial = store.ask({"max_num_seqs": "64", "enable_prefix_caching": "true"})
    with pytest.raises(KeyboardInterrupt), store.running(trial):
        raise KeyboardInterrupt
    assert store.study.get_trials()[0].state == TrialState.FAIL
    assert store.study.get_trials()[0].params == {"max_num_seqs": "64",
                                                   "enable_prefix_caching": "true"}


def test_a_study_without_heartbeats_has_its_running_trials_failed_on_resume(tmp_path: Path
                                                                             ) -> None:
    """A study started by a sweetspot without heartbeats: its RUNNING trial (a killed
    process's) would never go stale, so resuming fails it, as that sweetspot did."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    study.ask({"max_num_seqs": optuna.distributions.CategoricalDistribution(("16", "32"))})
    store = StudyStore.open(url, "s", SPACE, resume=True)
    assert [t.state for t in store.study.get_trials()] == [TrialState.FAIL]


def test_unknown_stored_settings_are_an_error_naming_them() -> None:
    stored = StudySettings(name="s", model="m", gpu="h100", quant=None, vllm_version="0.33.0",
                           workload={}, num_requests=10, slos={}, space={}, baseline={}
                           ).to_dict()
    assert StudySettings.from_dict(stored).name == "s"
    with pytest.raises(SweetspotError, match=r"'speculation_budget'.*does not know"):
        StudySettings.from_dict({**stored, "speculation_budget": 3})


def test_a_trial_of_a_dead_process_on_this_host_is_failed_at_once(tmp_path: Path) -> None:
    """A tune SIGKILLed mid-trial and resumed on the same machine goes on at once: the trial
    names its process (pid and start time), which no longer runs."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    StudyStore.open(url, "s", SPACE, resume=False)
    killed = subprocess.run([sys.executable, "-c", (
        "import os\n"
        "from tests.tune.test_store import SPACE\n"
        "from sweetspot.tune.store import StudyStore\n"
        f"store = StudyStore.open({url!r}, 's', SPACE, resume=True)\n"
        "store.ask({'max_num_seqs': '16', 'enable_prefix_caching': 'true'})\n"
        "os._exit(9)  # as if SIGKILLed: no tell, no cleanup\n")], timeout=60)
    assert killed.returncode == 9
    store = StudyStore.open(url, "s", SPACE, resume=True)  # well inside the heartbeat's grace
    assert not store.running_elsewhere({"max_num_seqs": "16", "enable_prefix_caching": "true"})
    assert [t.state for t in store.study.get_trials()] == [TrialState.FAIL]


def test_a_storage_another_process_is_creating_is_opened_after_it(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """Two processes creating one SQLite file at once: the slower one's schema stamp collides
    with the faster one's (seen in CI as "UNIQUE constraint failed: alembic_version"), and it
    opens the storage the other made instead of failing."""
    real, calls = optuna.storages.RDBStorage, []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: "
                               "alembic_version.version_num")
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = store_module._storage(f"sqlite:///{tmp_path / 'x.db'}")
    assert len(calls) == 2 and isinstance(storage, real)
    monkeypatch.setattr(optuna.storages, "RDBStorage", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("unable to open database file")))
    with pytest.raises(SweetspotError, match="cannot open the study storage"):
        store_module._storage(f"sqlite:///{tmp_path / 'y.db'}")


def test_a_rival_trial_still_getting_its_parameters_is_waited_for(tmp_path: Path) -> None:
    """Optuna writes a new trial's parameters one by one after handing out its number: a
    process asking for the same configuration meanwhile must wait for them and yield, not
    take the half-written lower trial for another configuration (then both ran it: 59
    configurations of 60 in the two-process test, under load)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = StudyStore.open(url, "s", SPACE, resume=False)
    storage = store.study._storage
    rival = storage.create_new_trial(store.study._study_id)  # numbered, no parameters yet
    dists = store.distributions
    storage.set_trial_param(rival, "max_num_seqs", dists["max_num_seqs"].to_internal_repr("16"),
                            dists["max_num_seqs"])
    labels = {"max_num_seqs": "16", "enable_prefix_caching": "false"}

    def finish() -> None:
        time.sleep(0.3)
        storage.set_trial_param(rival, "enable_prefix_caching",
                                dists["enable_prefix_caching"].to_internal_repr("false"),
                                dists["enable_prefix_caching"])

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        assert store.asked_before(labels, number=1)
    finally:
        writer.join()
    other = {"max_num_seqs": "32", "enable_prefix_caching": "false"}  # not the rival's
    assert not store.asked_before(other, number=1)
