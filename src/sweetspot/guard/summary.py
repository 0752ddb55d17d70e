"""A comparison in words: the cells of its table, its headline, and a Markdown summary fit for a
pull-request comment. Pure text from a ``Comparison``; the terminal table is the CLI's."""

from __future__ import annotations

from sweetspot.guard.compare import Comparison
from sweetspot.guard.metrics import Metric
from sweetspot.guard.verdict import MetricVerdict

__all__ = ["headline", "markdown", "rows"]

COLUMNS = ("Metric", "A", "B", "Change", "Interval", "Verdict")


def _value(metric: Metric, value: float | None) -> str:
    if value is None:
        return "-"
    if not metric.relative:  # a count, or a mean of counts over the runs
        return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def _change(metric: Metric, change: float | None) -> str:
    if change is None:
        return "-"
    return f"{change:+.1%}" if metric.relative else f"{change:+,.1f}"


def _tolerance(m: MetricVerdict) -> str:
    if not m.tolerance:
        return ""
    amount = f"{m.tolerance:.0%}" if m.metric.relative else f"{m.tolerance:g}"
    return f" (tolerance {amount})"


def rows(comparison: Comparison) -> list[tuple[str, ...]]:
    """One row of ``COLUMNS`` per metric; a guarded metric's label ends with " *"."""
    out = []
    for m in comparison.metrics:
        unit = f" ({m.metric.unit})" if m.metric.unit else ""
        interval = ("-" if m.low is None
                    else f"[{_change(m.metric, m.low)}, {_change(m.metric, m.high)}]")
        out.append((f"{m.metric.label}{unit}{' *' if m.guarded else ''}",
                    _value(m.metric, m.a), _value(m.metric, m.b), _change(m.metric, m.change),
                    interval, m.verdict + ("" if m.verdict == "not measured" else _tolerance(m))))
    return out


def headline(comparison: Comparison) -> str:
    """One line: the verdict and why."""
    c = comparison
    verdict = c.verdict
    if verdict == "worse":
        return f"B is worse than A: a regression ({'; '.join(c.regressions)})"
    if verdict == "better":
        better = [m.metric.label for m in c.metrics if m.guarded and m.verdict == "better"]
        why = c.failure if c.failure else ", ".join(better)
        return f"B is better than A ({why}), with no regression on a guarded metric"
    return "no significant difference between A and B on the guarded metrics"


def _method(comparison: Comparison) -> str:
    c, n = comparison, len(comparison.runs)
    levels = {round(m.level * 100, 1) for m in c.metrics if m.low is not None}
    level = f"{min(levels):g} %" if levels else "no"
    how = {"files": "two saved results",
           "endpoint": f"{n} interleaved pair(s) of runs on the two endpoints"}.get(
        c.source, f"{n} interleaved pair(s) of fresh servers ({c.source} backend)")
    stop = ", stopped early: every guarded metric decided" if c.stopped_early else ""
    return (f"{how}{stop}; {level} intervals of B against A (α = {c.plan.alpha:g} spent over "
            "the looks); * = guarded")


def markdown(comparison: Comparison) -> str:
    """A summary for a pull-request comment."""
    c = comparison
    mark = {"worse": "❌", "better": "✅"}.get(c.verdict, "➖")
    lines = [f"### {mark} sweetspot compare: {headline(c)}", "",
             f"- **A**: `{c.a_label}`", f"- **B**: `{c.b_label}`", f"- {_method(c)}", ""]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * 4 + ["---"]) + "|")
    for row in rows(c):
        verdict = row[-1]
        if verdict.startswith(("worse", "better")):
            verdict = f"**{verdict}**"
        lines.append("| " + " | ".join((*row[:-1], verdict)) + " |")
    if c.failure:
        lines += ["", f"**{c.failure}**"]
    if c.notes:
        lines += [""] + [f"- {note}" for note in c.notes]
    return "\n".join(lines) + "\n"
