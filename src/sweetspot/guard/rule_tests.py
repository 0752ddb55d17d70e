"""Unit tests for the emitted rules, in promtool's own format (``promtool test rules FILE``).

For every alert, two sets of raw vLLM series: one that must make it fire, one that must keep it
silent. The series are what a vLLM server exports — histogram buckets, counters, gauges, ``up``
and ``process_start_time_seconds`` — never the recorded series, so a test passes only when the
whole chain holds: the recording rule's PromQL on the release's metric names, the alert's
comparison, its threshold, its ``for``, its labels and its annotations.

How bad and good series are made, per threshold ``t``:

- latency (a quantile or the mean of a histogram): buckets at t/2, 2t, 4t and +Inf; the bad
  series put every observation in (2t, 4t] (every quantile and the mean lie above t), the good
  ones in (0, t/2] (all below).
- a rate: a counter rising at 2t per second (1/s when t is 0) against one at t/2.
- a gauge: halfway between t and 1 (a fraction) or 2t+1 (a count) against t/2.
- arrivals against a capacity t: requests finish at t per second while the queue grows by t per
  second (2t arrive), against t/2 finishing and no queue.
- ``up``: 1, then 0; a restart: the process start time changes, or (a second bad case, as with
  several API servers, whose registry has no process metrics) the counters reset.

Why a function of the package rather than of its tests: users get them beside the rules
(``write_rule_tests``) and rerun them after editing a threshold or a label, in their own CI; and
this package's tests run the very same file against every rule file they emit.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.guard.rules import Rule, RuleSet, seconds

__all__ = ["render_rule_tests", "rule_test_groups", "write_rule_tests"]

_EQ = re.compile(r'\s*([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')
_TEMPLATE = re.compile(r"\{\{ \$labels\.(\w+) \}\}")
MODEL = "model-under-test"
INSTANCE = "vllm-0:8000"


def rule_test_groups(rules: RuleSet) -> list[dict]:
    """promtool test groups: for each alert, one that must fire it and one that must not."""
    o = rules.options
    interval_s = _step_s(rules)
    target = _target_labels(o.selector, o.target_labels)
    vllm = {**target, **({o.model_label: MODEL} if o.model_label else {}), "engine": "0"}
    groups = []
    for alert in rules.alerts:
        eval_s = -(-_eval_s(alert, rules, interval_s) // interval_s) * interval_s  # a step
        count = int(eval_s // interval_s) + 5
        for fires, series in _cases(alert, target, vllm, count, interval_s):
            expected = [_expected(alert, target, vllm)] if fires else []
            groups.append({
                "interval": f"{interval_s}s",
                "input_series": [{"series": _series(name, labels), "values": values}
                                 for name, labels, values in series],
                "alert_rule_test": [{"eval_time": f"{int(eval_s)}s", "alertname": alert.name,
                                     "exp_alerts": expected}],
            })
    return groups


def _target_labels(selector: str, target_labels: tuple[str, ...]) -> dict[str, str]:
    """Labels a scrape target matching ``selector`` carries: its equality matchers, and a job
    and instance where the selector names none."""
    labels: dict[str, str] = {}
    for part in filter(str.strip, _split(selector)):
        match = _EQ.fullmatch(part)
        if not match:
            raise SweetspotError(f"rule tests need equality matchers (name=\"value\"); the "
                                 f"selector has {part.strip()!r}")
        labels[match[1]] = re.sub(r"\\(.)", r"\1", match[2])
    defaults = {"job": "vllm", "instance": INSTANCE}
    for name in target_labels:
        labels.setdefault(name, defaults.get(name, f"{name}-under-test"))
    return labels


def _split(selector: str) -> list[str]:
    """Matchers split at the commas outside quotes."""
    return re.findall(r'(?:[^,"]|"(?:[^"\\]|\\.)*")+', selector)


def _eval_s(alert: Rule, rules: RuleSet, step_s: int) -> float:
    """When to look: once the condition has held for the alert's ``for``, with a margin of two
    evaluations (of the group's own interval where it has one)."""
    o = rules.options
    margin_s = 2 * max(step_s, seconds(o.interval) if o.interval else 0)
    kind = alert.watch.kind if alert.watch is not None else ""
    if kind == "up":  # up is 0 from the third sample on
        return 2 * step_s + seconds(o.down_for) + margin_s
    if kind == "restart":  # the restart is at the fourth sample, and fires at once
        return 3 * step_s + margin_s
    return seconds(o.rate_window) + seconds(alert.for_ or "0s") + margin_s


def _cases(alert: Rule, target: dict, vllm: dict, n: int, i: int) -> list[tuple[bool, list]]:
    """(fires, series) pairs; each series is (metric, labels, promtool values)."""
    w = alert.watch
    if w is None:
        raise SweetspotError(f"alert {alert.name} says nothing of what it watches")
    if w.kind == "up":
        return [(True, [("up", target, f"1+0x1 0+0x{n}")]), (False, [("up", target, f"1+0x{n}")])]
    if w.kind == "restart":
        counter = (w.metric, vllm)
        return [
            (True, [("process_start_time_seconds", target, f"1000+0x2 2000+0x{n}"),
                    (*counter, f"0+10x{n}")]),
            (True, [(*counter, f"0+10x2 0+10x{n}")]),
            (False, [("process_start_time_seconds", target, f"1000+0x{n}"),
                     (*counter, f"0+10x{n}")]),
        ]
    t = w.threshold if w.threshold is not None else 0.0
    if w.kind in ("quantile", "mean"):
        return [(True, _histogram(w.metric, vllm, t, True, n)),
                (False, _histogram(w.metric, vllm, t, False, n))]
    if w.kind == "rate":
        bad, good = (2 * t, t / 2) if t > 0 else (1.0, 0.0)
        return [(True, [(w.metric, vllm, f"0+{_n(bad * i)}x{n}")]),
                (False, [(w.metric, vllm, f"0+{_n(good * i)}x{n}")])]
    if w.kind in ("fraction", "count"):
        bad = (t + 1) / 2 if w.kind == "fraction" else 2 * t + 1
        return [(True, [(w.metric, vllm, f"{_n(bad)}+0x{n}")]),
                (False, [(w.metric, vllm, f"{_n(t / 2)}+0x{n}")])]
    if w.kind == "arrivals":
        return [(True, _arrivals(vllm, t, i, n, queue_grows=True)),
                (False, _arrivals(vllm, t / 2, i, n, queue_grows=False))]
    raise SweetspotError(f"alert {alert.name} watches {w.kind!r}, which has no test series")


def _histogram(metric: str | None, labels: dict, t: float, bad: bool, n: int) -> list:
    """Bucket, count and sum series with 100 observations a step, every one in (2t, 4t] when
    ``bad``, else in (0, t/2]."""
    per_step, value = 100, (3 * t if bad else t / 4)
    series = []
    for le in (t / 2, 2 * t, 4 * t, "+Inf"):
        holds = not bad or le in (4 * t, "+Inf")  # cumulative: the bounds above the values
        bucket = {**labels, "le": le if isinstance(le, str) else _n(le)}
        series.append((f"{metric}_bucket", bucket, f"0+{per_step if holds else 0}x{n}"))
    series.append((f"{metric}_count", labels, f"0+{per_step}x{n}"))
    series.append((f"{metric}_sum", labels, f"0+{_n(per_step * value)}x{n}"))
    return series


def _arrivals(labels: dict, finish_rps: float, i: int, n: int, queue_grows: bool) -> list:
    """Finished requests, waiting and running (names every supported release shares)."""
    growth = _n(finish_rps * i) if queue_grows else "0"
    return [("vllm:request_success_total", {**labels, "finished_reason": "stop"},
             f"0+{_n(finish_rps * i)}x{n}"),
            ("vllm:num_requests_waiting", labels, f"0+{growth}x{n}"),
            ("vllm:num_requests_running", labels, f"4+0x{n}")]


def _expected(alert: Rule, target: dict, vllm: dict) -> dict:
    """The alert promtool must see: its labels and its annotations with $labels filled in."""
    if alert.watch is not None and alert.watch.kind == "up":
        labels = dict(target)
    else:
        labels = {k: v for k, v in vllm.items() if k in alert.kept}
    labels.update(alert.labels)
    annotations = {k: _TEMPLATE.sub(lambda m: labels.get(m[1], ""), v)
                   for k, v in alert.annotations.items()}
    return {"exp_labels": labels, "exp_annotations": annotations}


def _series(name: str, labels: dict) -> str:
    inner = ", ".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _n(x: float) -> str:
    """A number as promtool's series notation reads it."""
    return repr(round(float(x), 9))


def render_rule_tests(rules: RuleSet, rules_file: str) -> str:
    """promtool's unit-test file for ``rules``, which lives at ``rules_file`` (relative to the
    test file's folder, as promtool resolves it)."""
    source = " ".join(rules.source.split())
    header = (f"# promtool unit tests for the rules sweetspot wrote from {source}: each alert\n"
              "# fires on series that cross its threshold and stays silent on series that do "
              "not.\n# Run: promtool test rules THIS_FILE\n")
    body = {"rule_files": [rules_file], "evaluation_interval": f"{_step_s(rules)}s",
            "tests": rule_test_groups(rules)}
    return header + yaml.safe_dump(body, sort_keys=False, width=200, allow_unicode=True)


def _step_s(rules: RuleSet) -> int:
    """Seconds between samples and between evaluations: a quarter of the shortest window (so
    every window holds several samples), 1 s to 1 min."""
    o = rules.options
    shortest = min(seconds(o.rate_window), seconds(o.restart_window), seconds(o.down_for))
    return int(min(60, max(1, shortest // 4)))


def write_rule_tests(path: Path | str, rules: RuleSet, rules_file: Path | str) -> None:
    """Write promtool's unit tests for ``rules`` to ``path``; ``rules_file`` is where the rules
    are (written relative to ``path``'s folder when it lies below it)."""
    path, rules_file = Path(path), Path(rules_file)
    try:
        ref = rules_file.resolve().relative_to(path.resolve().parent).as_posix()
    except ValueError:
        ref = str(rules_file.resolve())
    write_text(path, render_rule_tests(rules, ref))
