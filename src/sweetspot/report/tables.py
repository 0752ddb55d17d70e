"""Tables as plain rows (shared by the HTML page, the CSV export and the terminal), plus rich.

Numbers stay numbers in the row objects; ``fmt_*`` turn them into the strings every view shows,
so the terminal and the HTML page print the same digits. Milliseconds and GiB appear only here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from sweetspot.report.figures import (
    P99_E2EL,
    P99_TPOT,
    P99_TTFT,
    THROUGHPUT,
    SweepData,
    sweeps,
)
from sweetspot.report.study import (
    changes_text,
    memory_gib,
    metric,
    picked,
    relative_change,
    trial_number,
)
from sweetspot.tune.result import PickResult, StudyResult, TrialResult

MISSING = "—"
SWEEP_HEADERS = ("value", "output tok/s", "P99 E2EL ms", "memory GiB", "status")
PICK_HEADERS = ("goal", "changes vs baseline", "output tok/s", "P99 TTFT ms", "P99 TPOT ms",
                "P99 E2EL ms", "gain over baseline")
TRIAL_HEADERS = ("#", "phase", "knob", "status", "changes vs baseline", "output tok/s",
                 "P99 TTFT ms", "P99 TPOT ms", "P99 E2EL ms", "memory GiB", "KV tokens",
                 "SLO ok", "cause")
_UPPER_WORDS = {"ttft", "tpot", "itl", "e2el", "kv", "slo"}


@dataclass(frozen=True, slots=True)
class PickRow:
    goal: str  # "baseline" for the first row
    trial: int
    status: str
    changes: str  # "knob old→new, ..." vs the baseline; empty for the baseline
    output_throughput: float | None  # tok/s
    p99_ttft_ms: float | None
    p99_tpot_ms: float | None
    p99_e2el_ms: float | None
    memory_gib: float | None
    over_capacity: bool  # latencies measured above the trial's capacity: not comparable
    gains: tuple[tuple[str, float], ...]  # (metric, relative change) from the pick, else computed
    reasons: tuple[str, ...]
    command: str  # the vllm serve command line; empty for the baseline
    yaml: str  # vLLM YAML config; may be empty


def pick_rows(study: StudyResult) -> tuple[PickRow, ...]:
    """The baseline, then each pick whose trial exists, in the study's goal order."""
    base = study.baseline_trial
    if base is None:
        return ()
    rows = [_pick_row("baseline", base, None, base)]
    rows += [_pick_row(pick.goal, trial, pick, base) for pick, trial in picked(study)]
    return tuple(rows)


def pick_cells(row: PickRow) -> tuple[str, ...]:
    """A pick row as PICK_HEADERS strings."""
    return (row.goal, row.changes or MISSING, fmt_num(row.output_throughput),
            fmt_num(row.p99_ttft_ms), fmt_num(row.p99_tpot_ms), fmt_num(row.p99_e2el_ms),
            gains_text(row.gains) or MISSING)


def sweep_cells(sweep: SweepData) -> list[tuple[str, ...]]:
    """The guide's per-knob table: value → throughput, P99 E2EL, memory, status (SWEEP_HEADERS)."""
    return [
        (p.label + (" (baseline)" if p.is_baseline else ""), fmt_num(p.output_throughput),
         fmt_num(p.p99_e2el_ms), fmt_num(p.memory_gib, 1), p.status)
        for p in sweep.points
    ]


def trial_cells(study: StudyResult) -> list[tuple[str, ...]]:
    """Every trial as TRIAL_HEADERS strings, in the study's order."""
    base = study.baseline_trial
    base_config = None if base is None else base.config
    rows = []
    for t in study.trials:
        changes = "" if t is base else changes_text(base_config, t.config)
        kv = t.kv_cache_tokens
        rows.append((
            str(t.number), t.phase or "", t.knob or "", t.status, changes,
            fmt_num(metric(t, THROUGHPUT)), fmt_num(metric(t, P99_TTFT)),
            fmt_num(metric(t, P99_TPOT)), fmt_num(metric(t, P99_E2EL)),
            fmt_num(memory_gib(t), 1), MISSING if kv is None else f"{kv:,}",
            _yes_no(t.slo_ok), t.cause or "",
        ))
    return rows


def csv_table(study: StudyResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of trials.csv: one column per config knob and per metric.

    Knob and metric columns are the union over all trials in first-seen order, so a knob set
    only by later trials still gets its column; unset cells are empty. Nested values (the
    speculative dict) are written as compact JSON.
    """
    trials = study.trials
    knobs = _union(t.config for t in trials)
    metrics = [m for m in _union(t.metrics for t in trials) if m not in knobs]
    head = ["number", "phase", "knob", "status", "cause"]  # TrialResult's fields
    tail = ["memory_bytes", "kv_cache_tokens", "slo_ok"]
    rows = []
    for t in trials:
        rows.append(
            [csv_cell(getattr(t, k)) for k in head]
            + [csv_cell(t.config.get(k)) for k in knobs]
            + [csv_cell(t.metrics.get(m)) for m in metrics]
            + [csv_cell(getattr(t, k)) for k in tail]
        )
    return head + knobs + metrics + tail, rows


def terminal_tables(study: StudyResult) -> list[Table]:
    """What ``sweetspot report`` prints, each table fitting an 80-column terminal.

    The picks' numbers, then what each pick changes and gains (one item a line, so cells wrap
    between items, never inside a number), the rate search, and one table per swept knob.
    Number columns never wrap; only text columns (goals, changes, values, causes) do, at spaces.
    """
    tables = []
    rows = pick_rows(study)
    if rows:
        tables.append(picks_numbers_table(rows, study.study))
        if len(rows) > 1:
            tables.append(picks_changes_table(rows))
    search = study.rate_search
    if search and "error" not in search:
        tables.append(goodput_table(search))
    for sweep in sweeps(study):
        table = Table(title=f"{sweep.knob} (one knob at a time)")
        for i, header in enumerate(SWEEP_HEADERS):
            _column(table, header, number=1 <= i <= 3)
        for cells in sweep_cells(sweep):
            table.add_row(*cells, style=None if cells[-1] == "ok" else "red")
        tables.append(table)
    return tables


TERMINAL_PICK_HEADERS = ("goal", "#", "output tok/s", "P99 TTFT ms", "P99 TPOT ms",
                         "P99 E2EL ms", "memory GiB")
OVER_CAPACITY_MARK = "*"


def picks_numbers_table(rows: Sequence[PickRow], study_name: str = "") -> Table:
    """Baseline and picks, numbers only: TERMINAL_PICK_HEADERS.

    A latency measured above the trial's capacity carries OVER_CAPACITY_MARK and the caption
    says it is not comparable.
    """
    table = Table(title=f"Picks — {study_name}".rstrip(" —"))
    goal_width = max(len(row.goal) for row in rows)
    for i, header in enumerate(TERMINAL_PICK_HEADERS):
        _column(table, header, number=i >= 1, min_width=goal_width if i == 0 else None)
    for row in rows:
        mark = OVER_CAPACITY_MARK if row.over_capacity else ""
        table.add_row(row.goal, str(row.trial), fmt_num(row.output_throughput),
                      *(fmt_num(v) + mark for v in (row.p99_ttft_ms, row.p99_tpot_ms,
                                                     row.p99_e2el_ms)),
                      fmt_num(row.memory_gib), style="red" if row.status != "ok" else None)
    if any(row.over_capacity for row in rows):
        table.caption = (f"{OVER_CAPACITY_MARK} measured above the trial's capacity: its queue "
                         "grew through the run, so the latency is not comparable")
    return table


def picks_changes_table(rows: Sequence[PickRow]) -> Table:
    """Each pick's changes against the baseline and its gains, one item a line."""
    table = Table(title="What each pick changes")
    _column(table, "goal", min_width=max(len(row.goal) for row in rows))
    _column(table, "changes vs baseline", ratio=3)
    _column(table, "gain over baseline", ratio=2)
    for row in rows:
        if row.goal == "baseline":
            continue
        changes = row.changes.split(", ") if row.changes else [MISSING]
        gains = gains_text(row.gains).split(", ") if row.gains else [MISSING]
        table.add_row(row.goal, "\n".join(changes), "\n".join(gains))
    return table


def _column(table: Table, header: str, number: bool = False, ratio: int | None = None,
            min_width: int | None = None) -> None:
    """Numbers right-aligned and never wrapped, their unit under the name; text wraps at spaces."""
    if number and " " in header:
        header = "\n".join(header.rsplit(" ", 1))  # "P99 TTFT ms" -> "P99 TTFT" over "ms"
    table.add_column(header, justify="right" if number else "left", no_wrap=number,
                     ratio=ratio, min_width=min_width)


GOODPUT_HEADERS = ("offered req/s", "P99 TTFT ms", "P99 TPOT ms", "P99 E2EL ms",
                   "SLOs", "missed")


def goodput_cells(search: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One row per probed rate, by rate (the rate search, ``tune/rate.py``)."""
    rows = []
    for probe in sorted(search.get("probes", ()), key=lambda p: p["rate"]):
        m = probe.get("metrics") or {}
        missed = ", ".join(metric_title(k) for k in probe.get("missed", ())) or (
            "" if probe["ok"] else f"{probe.get('status')}: {probe.get('cause') or ''}".strip(
                ": "))
        rows.append((f"{probe['rate']:.2f}", fmt_num(m.get("p99_ttft_ms")),
                     fmt_num(m.get("p99_tpot_ms")), fmt_num(m.get("p99_e2el_ms")),
                     "met" if probe["ok"] else "missed", missed))
    return rows


def goodput_table(search: Mapping[str, Any]) -> Table:
    table = Table(title=f"Goodput: trial {search.get('trial')} at rising request rates")
    for i, header in enumerate(GOODPUT_HEADERS):
        _column(table, header, number=i <= 3)
    for cells in goodput_cells(search):
        table.add_row(*cells, style=None if cells[4] == "met" else "red")
    return table


def goodput_text(search: Mapping[str, Any]) -> str:
    """The search's answer in one sentence."""
    if "error" in search:
        return search["error"]
    slos = ", ".join(f"{metric_title(k)} <= {v:g} ms" for k, v in search["slos"].items())
    capacity = f"capacity at rate inf: {search['capacity_rps']:.2f} req/s"
    best = search.get("max_rate")
    limited = ", ".join(metric_title(k) if k.endswith("_ms") else k
                        for k in search.get("limited_by", ()))
    if best is None:
        lowest = min((p["rate"] for p in search.get("probes", ())), default=0.0)
        return (f"goodput capacity: below {lowest:.2f} req/s — even the lowest rate probed "
                f"missed {limited or 'the SLOs'} ({slos}; {capacity})")
    above = "" if not limited else f"; above it {limited} breaks"
    if not search.get("limited_by"):
        above = "; every SLO held up to capacity"
    return (f"goodput capacity: {best:.2f} req/s, the highest rate probed that meets {slos} "
            f"({capacity}{above})")


def gains_text(gains: tuple[tuple[str, float], ...]) -> str:
    """``"+35.0 % output throughput, -12.0 % P99 E2EL"``."""
    return ", ".join(f"{100 * change:+.1f} % {metric_title(name)}" for name, change in gains)


def metric_title(name: str) -> str:
    """``p99_e2el_ms`` → ``P99 E2EL``; ``output_throughput`` → ``output throughput``."""
    if name == "memory_bytes":
        return "memory"
    words = name.removesuffix("_ms").split("_")
    return " ".join(
        w.upper() if w in _UPPER_WORDS or (w[:1] == "p" and w[1:].isdigit()) else w
        for w in words
    )


def fmt_num(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _pick_row(goal: str, trial: TrialResult, pick: PickResult | None,
              base: TrialResult) -> PickRow:
    """A pick's row (the baseline's own when ``pick`` is None: no changes, no gains)."""
    gains: tuple[tuple[str, float], ...] = ()
    if pick is not None:
        gains = tuple((str(k), float(v)) for k, v in pick.gain.items()
                      if isinstance(v, int | float) and not isinstance(v, bool))
    if pick is not None and not gains:
        computed = ((m, relative_change(metric(trial, m), metric(base, m)))
                    for m in (THROUGHPUT, P99_E2EL))
        gains = tuple((m, c) for m, c in computed if c is not None)
    return PickRow(
        goal=goal,
        trial=trial_number(trial),
        status=trial.status,
        changes="" if pick is None else changes_text(base.config, trial.config),
        output_throughput=metric(trial, THROUGHPUT),
        p99_ttft_ms=metric(trial, P99_TTFT),
        p99_tpot_ms=metric(trial, P99_TPOT),
        p99_e2el_ms=metric(trial, P99_E2EL),
        memory_gib=memory_gib(trial) if trial.status == "ok" else None,
        over_capacity=trial.over_capacity,
        gains=gains,
        reasons=() if pick is None else tuple(str(r) for r in pick.reasons),
        command="" if pick is None else pick.command or "",
        yaml="" if pick is None else pick.yaml or "",
    )


def _union(dicts: Any) -> list[str]:
    keys: dict[str, None] = {}
    for d in dicts:
        for k in d:
            keys.setdefault(str(k), None)
    return list(keys)


def _yes_no(value: Any) -> str:
    return MISSING if value is None else ("yes" if value else "no")

