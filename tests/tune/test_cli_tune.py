"""`sweetspot tune` and `sweetspot report` as a user runs them (simulator backend)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from sweetspot.engine.lint import lint_command
from sweetspot.spec.hardware import load_hardware
from sweetspot.testing.mock_server import MockServerConfig, start_mock_server
from tests.conftest import run_cli

SMALL = ("--model", "qwen2.5-0.5b", "--quant", "bf16", "--gpu", "a100-80gb", "--workload",
         "short", "--num-requests", "24", "--confirm", "1", "--vllm-version", "0.33.0")


def _tune(tmp_path: Path, *args: str):
    return run_cli("tune", *SMALL, "--storage", f"sqlite:///{tmp_path / 'studies.db'}",
                   "--report-dir", str(tmp_path / "report"), *args)


def test_tune_prints_four_picks_with_valid_commands_and_writes_the_report(tmp_path: Path
                                                                          ) -> None:
    done = _tune(tmp_path, "--trials", "10", "--study-name", "s1")
    assert done.returncode == 0, done.stderr + done.stdout
    for goal in ("max-throughput", "low-latency", "memory-limited", "balanced"):
        assert f"\n{goal} (trial " in done.stdout
    commands = re.findall(r"^vllm serve .*$", done.stdout, flags=re.M)
    assert len(commands) == 4
    for command in commands:  # every printed command passes lint for its version and GPU
        report = lint_command(command, Version("0.33.0"), load_hardware("a100-80gb"))
        assert report.exit_code == 0, (command, report.findings)
    report_dir = tmp_path / "report"
    assert (report_dir / "report.html").exists() and (report_dir / "trials.csv").exists()
    assert list(report_dir.glob("*.png"))
    data = json.loads((report_dir / "trials.json").read_text())
    assert len(data["trials"]) == 10 and data["picks"]
    again = run_cli("report", "s1", "--storage", f"sqlite:///{tmp_path / 'studies.db'}",
                    "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "report.html").exists()


def test_resume_continues_with_the_stored_settings(tmp_path: Path) -> None:
    first = _tune(tmp_path, "--trials", "4", "--study-name", "s2", "--confirm", "0")
    assert first.returncode == 0, first.stderr
    more = run_cli("tune", "--resume", "--study-name", "s2", "--trials", "6", "--storage",
                   f"sqlite:///{tmp_path / 'studies.db'}", "--report-dir",
                   str(tmp_path / "r2"))
    assert more.returncode == 0, more.stderr
    assert "6 trials" in more.stdout and "qwen2.5-0.5b" in more.stdout.lower()
    data = json.loads((tmp_path / "r2" / "trials.json").read_text())
    assert [t["number"] for t in data["trials"]][:4] == list(range(4))


def test_fix_pins_a_knob_for_the_whole_study_and_resume_keeps_it(tmp_path: Path) -> None:
    """--fix max-model-len 4096: no --baseline and no --space knob= needed; the baseline and
    every trial run at 4096, the space does not vary it, a resumed study still pins it."""
    first = _tune(tmp_path, "--trials", "5", "--study-name", "pin", "--confirm", "0",
                  "--fix", "max-model-len=4096", "--fix", "enable_prefix_caching=false")
    assert first.returncode == 0, first.stderr + first.stdout
    more = run_cli("tune", "--resume", "--study-name", "pin", "--trials", "8", "--storage",
                   f"sqlite:///{tmp_path / 'studies.db'}", "--report-dir", str(tmp_path / "r2"))
    assert more.returncode == 0, more.stderr + more.stdout
    data = json.loads((tmp_path / "r2" / "trials.json").read_text())
    settings = data["settings"]
    assert settings["fixed"] == {"max_model_len": "4096", "enable_prefix_caching": "false"}
    assert "max_model_len" not in settings["space"] and settings["space"]
    assert "enable_prefix_caching" not in settings["space"]
    assert settings["baseline"]["max_model_len"] == 4096
    assert len(data["trials"]) == 8
    for trial in data["trials"]:
        assert trial["config"]["max_model_len"] == 4096, trial
        assert trial["config"]["enable_prefix_caching"] is False, trial
    assert len({json.dumps(t["config"], sort_keys=True) for t in data["trials"]}) == 8
    again = run_cli("tune", "--resume", "--study-name", "pin", "--fix", "max_num_seqs=8",
                    "--storage", f"sqlite:///{tmp_path / 'studies.db'}")
    assert again.returncode == 2 and "a resumed one keeps the knobs it pinned" in again.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--space", "max_num_seqs=64,128", "--space", "colour=red"), "unknown knob 'colour'"),
    (("--space", "max_num_seqs=64,,128"), "empty value in the range of max_num_seqs"),
    (("--space", "max_num_seqs=0"), "--max-num-seqs must be >= 1"),
    (("--slo", "p99_latency=3s"), "bad SLO"),
    (("--strategy", "random-walk"), "--strategy must be one of"),
    (("--strategy", "rate"), "--strategy rate finds the highest rate that meets the SLOs"),
    (("--backend", "endpoint", "--url", "http://127.0.0.1:9"), "only --strategy rate applies"),
    (("--backend", "endpoint"), "--backend endpoint needs --url"),
    (("--backend", "endpoint", "--url", "http://127.0.0.1:9", "--strategy", "rate", "--slo",
      "p99_ttft=1s"), "cannot reach http://127.0.0.1:9"),
    (("--storage", "postgresql://nobody@127.0.0.1:1/x"), "cannot open the study storage"),
    (("--baseline", "vllm serve m --max-num-seqs lots"), "--baseline"),
    (("--fix", "colour=1"), "unknown knob 'colour'"),
    (("--fix", "max_num_seqs=64,128"), "one value pins a knob"),
    (("--fix", "max_num_seqs=lots"), "bad value 'lots' for max_num_seqs"),
    (("--fix", "max_num_seqs=64", "--space", "max_num_seqs=32,64"),
     "given to both --fix and --space"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args, message: str) -> None:
    done = run_cli("tune", *SMALL, "--storage", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_rate_strategy_finds_the_goodput_capacity_of_the_baseline(tmp_path: Path) -> None:
    """On the simulator: the baseline's capacity at rate inf, then ladders of Poisson rates
    below it; the highest rate meeting the SLO is printed, stored and drawn."""
    done = _tune(tmp_path, "--strategy", "rate", "--slo", "p99_ttft=150ms", "--study-name",
                 "g", "--num-requests", "120")
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads((tmp_path / "report" / "trials.json").read_text())
    search = data["rate_search"]
    assert len(data["trials"]) == 1 and search["trial"] == data["trials"][0]["number"]
    capacity = data["trials"][0]["metrics"]["request_throughput"]
    assert search["capacity_rps"] == pytest.approx(capacity)
    probes = sorted(search["probes"], key=lambda p: p["rate"])
    assert len(probes) >= 5 and all(p["rate"] <= capacity * (1 + 1e-9) for p in probes)
    best = search["max_rate"]
    assert best is not None and 0 < best <= capacity
    assert all(p["ok"] for p in probes if p["rate"] <= best)
    for p in probes:  # the verdict is the SLO: P99 TTFT against 150 ms
        assert p["ok"] == (p["metrics"]["p99_ttft_ms"] <= 150.0), p
    assert f"goodput capacity: {best:.2f} req/s" in done.stdout
    assert (tmp_path / "report" / "goodput.png").exists()
    assert "Goodput capacity" in (tmp_path / "report" / "report.html").read_text()


def test_goodput_of_a_running_endpoint(tmp_path: Path) -> None:
    """A live server (the mock: 4 requests at a time, the rest queue) measured as it runs:
    its TTFT grows with the queue as the offered rate nears its capacity."""
    config = MockServerConfig(ttft_s=0.010, itl_s=0.002, max_num_seqs=4)
    with start_mock_server(config) as url:
        done = run_cli("tune", "--backend", "endpoint", "--url", url, "--strategy", "rate",
                       "--slo", "p99_ttft=60ms", "--model", "qwen2.5-0.5b", "--quant", "bf16",
                       "--workload", str(_small_workload(tmp_path)), "--num-requests", "40",
                       "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study-name", "live",
                       "--report-dir", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr + done.stdout
    search = json.loads((tmp_path / "report" / "trials.json").read_text())["rate_search"]
    # 4 slots, each request 10 ms + 15 x 2 ms = 40 ms: about 100 requests/s at rate inf.
    assert 50 < search["capacity_rps"] < 110
    assert search["max_rate"] is not None and search["max_rate"] < search["capacity_rps"]
    assert search["limited_by"] == ["p99_ttft_ms"]
    assert "goodput capacity:" in done.stdout


def _small_workload(tmp_path: Path) -> Path:
    path = tmp_path / "wl.yaml"
    path.write_text("prompt: {kind: fixed, value: 16}\noutput: {kind: fixed, value: 16}\n"
                    "arrival: {process: poisson, rate: 20}\n")
    return path


def test_missing_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    resumed = run_cli("tune", "--resume", "--study-name", "nope", "--storage", url)
    assert resumed.returncode == 2 and "no study named 'nope'" in resumed.stderr
    reported = run_cli("report", "nope", "--storage", url)
    assert reported.returncode == 2 and "no study named 'nope'" in reported.stderr


def test_default_tune_on_the_simulator_warns_of_no_bunched_streams(tmp_path: Path) -> None:
    """The burst warning is about a real client starved of CPU: an overloaded simulation
    (preempted requests' stalls lift the mean TPOT above twice the median ITL) is not one."""
    result = run_cli("tune", "--storage",
                     f"sqlite:///{tmp_path / 's.db'}", "--report-dir", str(tmp_path / "r"))
    assert result.returncode in (0, 1), result.stderr
    assert "arrived in bursts" not in result.stderr
