"""The emitted rules under Prometheus' own tool: ``promtool check rules`` accepts them and
``promtool test rules`` passes the unit tests ``rule_tests`` writes for them — every alert fires
on series that cross its threshold and stays silent on series that do not. Mutated rules (an
alert that can never fire, one that always fires) fail those tests, so they test something.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from sweetspot.guard.rule_tests import render_rule_tests, write_rule_tests
from sweetspot.guard.rules import RuleOptions, RuleSet, prometheus_rules, render_rules, write_rules
from tests.guard.envelopes import FULL, OLD, QUICK, SPARSE, STATS

CASES = {"full": (FULL, None), "sparse": (SPARSE, None), "old-release": (OLD, None),
         "statistics": (STATS, None),
         "options": (FULL, RuleOptions(selector='namespace="prod",job="vllm"',
                                       model_label=None, interval="30s")),
         "quick": (FULL, QUICK)}


def _promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", sorted(CASES))
def test_promtool_accepts_the_rules_and_passes_their_tests(promtool, tmp_path, case):
    envelope, options = CASES[case]
    rules = write_rules(tmp_path / "rules.yml", envelope, options)
    checked = _promtool(promtool, "check", "rules", str(tmp_path / "rules.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = len(rules.recording) + len(rules.alerts)
    assert f"SUCCESS: {found} rules found" in checked.stdout
    write_rule_tests(tmp_path / "rules.test.yml", rules, tmp_path / "rules.yml")
    tested = _promtool(promtool, "test", "rules", str(tmp_path / "rules.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tests = yaml.safe_load((tmp_path / "rules.test.yml").read_text())
    assert tests["rule_files"] == ["rules.yml"]
    fired = [t["alert_rule_test"][0]["alertname"] for t in tests["tests"]
             if t["alert_rule_test"][0]["exp_alerts"]]
    silent = [t["alert_rule_test"][0]["alertname"] for t in tests["tests"]
              if not t["alert_rule_test"][0]["exp_alerts"]]
    assert sorted(silent) == sorted(a.name for a in rules.alerts)  # each alert: a quiet case
    assert sorted(set(fired)) == sorted(silent)  # and at least one that fires it


def _mutated(rules: RuleSet, name: str, expr: str) -> RuleSet:
    alerts = tuple(dataclasses.replace(a, expr=expr) if a.name == name else a
                   for a in rules.alerts)
    return dataclasses.replace(rules, alerts=alerts)


@pytest.mark.parametrize("mutation", ["never fires", "always fires"])
def test_the_rule_tests_fail_on_a_broken_alert(promtool, tmp_path, mutation):
    rules = prometheus_rules(FULL)
    tests = yaml.safe_load(render_rule_tests(rules, "rules.yml"))  # those of the intact rules
    for alert in rules.alerts:
        broken = _mutated(rules, alert.name, "vector(1) > 2" if mutation == "never fires"
                          else f"{alert.expr} or on() vector(1)")
        (tmp_path / "rules.yml").write_text(render_rules(broken))
        (tmp_path / "tests.yml").write_text(yaml.safe_dump({**tests, "tests": [
            t for t in tests["tests"] if t["alert_rule_test"][0]["alertname"] == alert.name]}))
        tested = _promtool(promtool, "test", "rules", str(tmp_path / "tests.yml"))
        assert tested.returncode != 0, f"{alert.name} {mutation}, and its tests passed"
        assert alert.name in tested.stdout + tested.stderr
