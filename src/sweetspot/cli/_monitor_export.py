"""`sweetspot monitor --emit-rules/--emit-rule-tests/--emit-dashboard`: a tuned pick as
Prometheus rules, their promtool unit tests and a Grafana dashboard, written offline (no
``--url``: nothing is scraped)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import _out

__all__ = ["Exports", "write_exports"]


@dataclass(frozen=True, slots=True)
class Exports:
    """What to write, and how the rules select the deployment."""

    rules: Path | None = None
    rule_tests: Path | None = None
    dashboard: Path | None = None
    selector: str = 'job="vllm"'
    alert_for: str = "5m"

    @property
    def wanted(self) -> bool:
        return any(p is not None for p in (self.rules, self.rule_tests, self.dashboard))


def write_exports(exports: Exports, baseline: str | None, storage: str | None) -> bool:
    """Write every asked-for file for ``baseline``'s envelope, one line per file written;
    True once written."""
    if baseline is None:
        raise SweetspotError("--emit-rules, --emit-rule-tests and --emit-dashboard need "
                             "--baseline STUDY[:goal] or a bench --json RESULT: the thresholds "
                             "come from what was tuned")
    if exports.rule_tests is not None and exports.rules is None:
        raise SweetspotError("--emit-rule-tests needs --emit-rules FILE: promtool's tests "
                             "load the rules file they test")
    from sweetspot.guard.baseline import load_baseline
    from sweetspot.guard.rules import RuleOptions, write_rules

    envelope = load_baseline(baseline, storage)
    options = RuleOptions(selector=exports.selector, for_=exports.alert_for)
    if exports.rules is not None:
        rules = write_rules(exports.rules, envelope, options)
        kept = ", ".join(r.name for r in rules.alerts)
        _out.print(f"wrote {exports.rules}: {len(rules.recording)} recording rules, alerts "
                   f"{kept}", markup=False)
        for name, why in rules.left_out:
            _out.print(f"  left out {name}: {why}", markup=False)
        if exports.rule_tests is not None:
            from sweetspot.guard.rule_tests import write_rule_tests

            write_rule_tests(exports.rule_tests, rules, exports.rules)
            _out.print(f"wrote {exports.rule_tests}: promtool test rules {exports.rule_tests}",
                       markup=False)
    if exports.dashboard is not None:
        from sweetspot.guard.dashboard import write_dashboard

        dashboard = write_dashboard(exports.dashboard, envelope, options)
        _out.print(f"wrote {exports.dashboard}: Grafana dashboard, "
                   f"{len(dashboard['panels'])} panels", markup=False)
    return True
