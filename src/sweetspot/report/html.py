"""The report as one self-contained HTML page: inline CSS, PNGs as data URIs, no script, no URL.

Every piece of study text (names, commands, causes, reasons) goes through ``html.escape``; the
page fetches nothing, so it can be mailed or attached to a ticket as is.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from sweetspot.report.figures import sweeps
from sweetspot.report.study import redact_url
from sweetspot.report.tables import (
    GOODPUT_HEADERS,
    PICK_HEADERS,
    SWEEP_HEADERS,
    TRIAL_HEADERS,
    goodput_cells,
    goodput_text,
    metric_title,
    pick_cells,
    pick_rows,
    sweep_cells,
    trial_cells,
)
from sweetspot.tune.result import StudyResult

CAPTIONS = {
    "max_model_len.png": "max-model-len against output throughput and device memory: a shorter "
                         "context leaves more memory for KV blocks, so more requests run at once.",
    "policy_latency.png": "P99 time to first token and P99 end-to-end latency per scheduling "
                          "policy.",
    "speculative.png": "Speculative decoding: output throughput and time per output token of "
                       "each setup, with the change against no speculation.",
    "knob_gains.png": "Each knob tried on its own: its best value's output throughput over the "
                      "baseline's.",
    "picks.png": "Each pick against the baseline on every goal's number: output throughput, "
                 "P99 TTFT, P99 TPOT and device memory (green better, red worse; hatched: "
                 "measured above capacity, not comparable).",
    "goodput.png": "The rate search: each SLO'd latency as a share of its limit at rising "
                   "offered rates; the goodput capacity is the highest rate with every line "
                   "under 1.",
    "pareto.png": "Every ok trial in throughput vs P99 end-to-end latency; the Pareto front "
                  "joined, picks ringed and named, failed trials listed below the plot.",
}
_HEADER_FIELDS = (("model", "model"), ("gpu", "GPU"), ("vllm_version", "vLLM"),
                  ("workload", "workload"), ("backend", "backend"), ("objective", "objective"),
                  ("storage", "storage"))
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { color: #b00; } tr.baseline td { background: #fafafa; }
pre { background: #f6f6f6; padding: 0.5em; white-space: pre-wrap; word-break: break-all;
      margin: 0; font-size: 0.85em; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { color: #555; }
.meta span { margin-right: 1.5em; } .verdict { padding: 0.5em; background: #eef6ee; }
"""


def render_html(study: StudyResult, pngs: Sequence[Path]) -> str:
    """The whole page for ``study`` with the PNG files ``pngs`` embedded in the given order."""
    name = study.study or "study"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>sweetspot report: {escape(name)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>sweetspot report: {escape(name)}</h1>",
        _header(study),
        _slos(study),
        _confirmation(study),
        _goodput(study),
        _picks(study),
        _figures(pngs),
        _sweeps(study),
        "<h2>All trials</h2>",
        _table(TRIAL_HEADERS, trial_cells(study), numeric={5, 6, 7, 8, 9, 10}, status_col=3),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _header(study: StudyResult) -> str:
    spans = []
    for key, title in _HEADER_FIELDS:
        value = getattr(study, key)
        if key == "storage":
            value = redact_url(value)
        if value not in (None, ""):
            spans.append(f"<span><b>{escape(title)}:</b> {escape(str(value))}</span>")
    return f'<p class="meta">{"".join(spans)}</p>'


def _slos(study: StudyResult) -> str:
    slos = study.slos
    if not slos:
        return "<p><b>SLOs:</b> none</p>"
    items = []
    for key, limit in slos.items():
        unit = " ms" if str(key).endswith("_ms") else ""
        items.append(f"{metric_title(str(key))} ≤ {_num(limit)}{unit}")
    return f"<p><b>SLOs:</b> {escape(', '.join(items))}</p>"


def _confirmation(study: StudyResult) -> str:
    confirmation = study.confirmation
    if not confirmation:
        return ""
    verdict = escape(str(confirmation.get("verdict") or ""))
    text = escape(str(confirmation.get("text") or ""))
    return f'<p class="verdict"><b>Confirmation: {verdict}.</b> {text}</p>'


def _goodput(study: StudyResult) -> str:
    search = study.rate_search
    if not search:
        return ""
    out = ["<h2>Goodput capacity</h2>", f'<p class="verdict">{escape(goodput_text(search))}</p>']
    if "error" not in search:
        head = "".join(f"<th>{escape(h)}</th>" for h in GOODPUT_HEADERS)
        body = []
        for cells in goodput_cells(search):
            tds = "".join(f'<td class="num">{escape(c)}</td>' if i <= 3 else
                          f"<td>{escape(c)}</td>" for i, c in enumerate(cells))
            css = "" if cells[4] == "met" else ' class="failed"'
            body.append(f"<tr{css}>{tds}</tr>")
        out.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    return "\n".join(out)


def _picks(study: StudyResult) -> str:
    rows = pick_rows(study)
    if not rows:
        return "<h2>Picks</h2><p>No baseline in this study: nothing to compare.</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in (*PICK_HEADERS, "reasons", "command"))
    body = []
    for row in rows:
        cells = pick_cells(row)
        tds = [f'<td class="num">{escape(c)}</td>' if 2 <= i <= 5 else f"<td>{escape(c)}</td>"
               for i, c in enumerate(cells)]
        tds.append("<td>" + "<br>".join(escape(r) for r in row.reasons) + "</td>")
        command = f"<pre>{escape(row.command)}</pre>" if row.command else ""
        if row.yaml:
            command += (f"<details><summary>YAML config</summary><pre>{escape(row.yaml)}</pre>"
                        "</details>")
        tds.append(f"<td>{command}</td>")
        css = ' class="baseline"' if row.goal == "baseline" else (
            ' class="failed"' if row.status != "ok" else "")
        body.append(f"<tr{css}>{''.join(tds)}</tr>")
    note = ("" if len(rows) > 1 else
            "<p>No picks: the tuner chose no configuration over the baseline.</p>")
    return f"<h2>Picks</h2><table><tr>{head}</tr>{''.join(body)}</table>{note}"


def _figures(pngs: Sequence[Path]) -> str:
    if not pngs:
        return ""
    out = ["<h2>Figures</h2>"]
    for path in pngs:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        caption = CAPTIONS.get(path.name)
        if caption is None and path.name.startswith("sweep_"):
            caption = (f"{path.stem.removeprefix('sweep_')} tried one value at a time: output "
                       "throughput and P99 E2EL; failed values marked with their status.")
        out.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{escape(path.stem)}">'
            f"<figcaption>{escape(caption or path.stem)}</figcaption></figure>"
        )
    return "\n".join(out)


def _sweeps(study: StudyResult) -> str:
    out = []
    for sweep in sweeps(study):
        out.append(f"<h3>{escape(sweep.knob)}</h3>")
        out.append(_table(SWEEP_HEADERS, sweep_cells(sweep), numeric={1, 2, 3}, status_col=4))
    if not out:
        return ""
    return "<h2>One knob at a time</h2>\n" + "\n".join(out)


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int],
           status_col: int) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        tds = "".join(
            f'<td class="num">{escape(c)}</td>' if i in numeric else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        css = ' class="failed"' if row[status_col] != "ok" else ""
        body.append(f"<tr{css}>{tds}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)
