"""``sweetspot tune --worker`` on a PostgreSQL study (Debian's server, started by the test):
two workers and a third started late share one budget, no configuration runs twice, a worker
killed with SIGKILL leaves its trial failed and the others finish the budget; the last worker
makes the picks and ``report`` reads the study while it runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import run_cli
from tests.postgres_install import postgres_url  # noqa: F401 (a fixture)

TRIALS = 40
OPTIONS = ["--model", "qwen2.5-0.5b", "--gpu", "l4", "--workload", "short",
           "--num-requests", "64", "--confirm", "0", "--trials", str(TRIALS),
           "--executor", "local"]


def _worker(url: str, folder: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sweetspot.cli", "tune", "--worker", "--study-name", "w",
         "--storage", url, "--report-dir", str(folder / name), *OPTIONS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    if "w" not in optuna.get_all_study_names(url):
        return []
    return optuna.load_study(study_name="w", storage=url).get_trials(deepcopy=False)


def _wait(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _finished_by(url: str, *workers: subprocess.Popen) -> bool:
    """Whether each of ``workers`` has finished a trial (a simulated trial takes a tenth of a
    second: one worker can finish several before another has imported the package)."""
    done = [str((t.user_attrs.get("owner") or {}).get("process", "")).split(":")[0]
            for t in _trials(url) if t.state == TrialState.COMPLETE]
    return len(done) >= 6 and all(str(w.pid) in done for w in workers)


def _kill_mid_trial(worker: subprocess.Popen, url: str) -> int:
    """SIGKILL ``worker`` while it runs a trial (stopped and looked at until it does: a
    simulated trial takes a tenth of a second); that trial's number."""
    mark = f"{worker.pid}:"
    for _ in range(200):
        worker.send_signal(signal.SIGSTOP)
        mine = [t.number for t in _trials(url) if t.state == TrialState.RUNNING
                and str((t.user_attrs.get("owner") or {}).get("process", "")).startswith(mark)
                and t.params]
        if mine:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            return mine[0]
        worker.send_signal(signal.SIGCONT)
        time.sleep(0.03)
    raise AssertionError("the worker never ran a trial")


def test_workers_share_one_budget_and_survive_a_killed_one(postgres_url: str,  # noqa: F811
                                                           tmp_path: Path) -> None:
    url = postgres_url
    first, second = _worker(url, tmp_path, "a"), _worker(url, tmp_path, "b")
    try:
        _wait(lambda: _finished_by(url, first, second), 120)
        killed = _kill_mid_trial(second, url)
        third = _worker(url, tmp_path, "c")  # late
        report = run_cli("report", "w", "--storage", url, "--out", str(tmp_path / "live"))
        assert report.returncode == 0, report.stderr  # the study is read while it runs
        outs = [p.communicate(timeout=300) for p in (first, third)]
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert (first.returncode, third.returncode) == (0, 0), outs
    trials = _trials(url)
    rows = [t.user_attrs["row"] for t in trials if t.state == TrialState.COMPLETE]
    ran = [r for r in rows if r.get("duplicate_of") is None]
    configs = [json.dumps(r["config"], sort_keys=True) for r in ran]
    assert len(configs) == len(set(configs)) == TRIALS  # each configuration once: the budget
    # the killed worker's trial is failed; another worker ran the budget it gave back
    assert next(t for t in trials if t.number == killed).state == TrialState.FAIL
    owners = {str(t.user_attrs["owner"]["process"]).split(":")[0]
              for t in trials if t.state == TrialState.COMPLETE}
    assert {str(p.pid) for p in (first, second, third)} <= owners  # each took part
    printed = [out for out, _ in outs]
    assert sum("max-throughput (trial" in out for out in printed) == 1, printed
    assert sum("picks are made by the last worker" in out for out in printed) <= 1
    study = optuna.load_study(study_name="w", storage=url)
    assert len(study.user_attrs["picks"]) == 4


@pytest.mark.parametrize(("storage", "error"), [
    ("postgresql+psycopg://nobody@127.0.0.1:1/x", "cannot open the study storage "
                                                  "postgresql+psycopg://nobody@127.0.0.1:1/x"),
    ("mysql://x", "cannot open the study storage mysql://x"),
])
def test_a_bad_storage_url_is_one_line(storage: str, error: str) -> None:
    result = run_cli("tune", "--worker", "--study-name", "w", "--storage", storage,
                     "--trials", "4")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {error}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
