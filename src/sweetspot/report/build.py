"""``build_report``: every export of one study, written into one folder."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweetspot._files import atomic_path, write_text
from sweetspot.report.html import render_html
from sweetspot.report.study import baseline_trial, changes_text, redacted, trials_by_number
from sweetspot.report.tables import csv_table


@dataclass(frozen=True, slots=True)
class ReportFiles:
    html: Path  # report.html, self-contained
    pngs: tuple[Path, ...]  # the figures the study had data for, in page order
    trials_json: Path  # the full study
    trials_csv: Path  # one row per trial
    picks_json: Path  # baseline and picks with their configs


def build_report(study: Mapping[str, Any], out_dir: Path) -> ReportFiles:
    """Write trials.json, trials.csv, picks.json, the figures and report.html into ``out_dir``.

    A storage URL's password is masked in everything written.
    """
    from sweetspot.report.render import render_figures  # loads matplotlib: only when drawing

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    study = redacted(study)

    trials_json = out_dir / "trials.json"
    write_text(trials_json, json.dumps(study, indent=2) + "\n")

    trials_csv = out_dir / "trials.csv"
    header, rows = csv_table(study)
    with atomic_path(trials_csv) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)

    picks_json = out_dir / "picks.json"
    write_text(picks_json, json.dumps(picks_document(study), indent=2) + "\n")

    pngs = render_figures(study, out_dir)
    html = out_dir / "report.html"
    write_text(html, render_html(study, pngs))
    return ReportFiles(html=html, pngs=pngs, trials_json=trials_json, trials_csv=trials_csv,
                       picks_json=picks_json)


def picks_document(study: Mapping[str, Any]) -> dict[str, Any]:
    """picks.json: the study's identity, the baseline and each pick with its trial's results.

    Each pick keeps the tuner's keys and gains ``config``, ``changes`` (vs the baseline),
    ``status`` and ``metrics`` from its trial, so the file alone is enough to deploy a pick.
    """
    base = baseline_trial(study)
    base_config = None if base is None else base.get("config") or {}
    trials = trials_by_number(study)
    picks = []
    for pick in study.get("picks") or ():
        trial = trials.get(int(pick["trial"])) if pick.get("trial") is not None else None
        entry = dict(pick)
        if trial is not None:
            config = trial.get("config") or {}
            entry.update(config=config, changes=changes_text(base_config, config),
                         status=trial.get("status"), metrics=trial.get("metrics") or {})
        picks.append(entry)
    keys = ("study", "model", "gpu", "vllm_version", "workload", "backend", "objective", "slos")
    return {
        **{k: study.get(k) for k in keys},
        "baseline": None if base is None else {
            "trial": base.get("number"), "config": base.get("config") or {},
            "status": base.get("status"), "metrics": base.get("metrics") or {},
        },
        "picks": picks,
        "confirmation": study.get("confirmation"),
    }
