"""`sweetspot tune` and `sweetspot report` as a user runs them (simulator backend)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from sweetspot.engine.lint import lint_command
from sweetspot.spec.hardware import load_hardware
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


@pytest.mark.parametrize(("args", "message"), [
    (("--space", "max_num_seqs=64,128", "--space", "colour=red"), "unknown knob 'colour'"),
    (("--space", "max_num_seqs=64,,128"), "empty value in the range of max_num_seqs"),
    (("--space", "max_num_seqs=0"), "--max-num-seqs must be >= 1"),
    (("--slo", "p99_latency=3s"), "bad SLO"),
    (("--strategy", "random-walk"), "--strategy must be one of"),
    (("--storage", "postgresql://nobody@127.0.0.1:1/x"), "cannot open the study storage"),
    (("--baseline", "vllm serve m --max-num-seqs lots"), "--baseline"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args, message: str) -> None:
    done = run_cli("tune", *SMALL, "--storage", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_missing_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    resumed = run_cli("tune", "--resume", "--study-name", "nope", "--storage", url)
    assert resumed.returncode == 2 and "no study named 'nope'" in resumed.stderr
    reported = run_cli("report", "nope", "--storage", url)
    assert reported.returncode == 2 and "no study named 'nope'" in reported.stderr
