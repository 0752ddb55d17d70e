"""``build_report``: every export of one study, written into one folder."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweetspot._files import atomic_path, write_text
from sweetspot.report.html import render_html
from sweetspot.report.study import changes_text, redacted
from sweetspot.report.tables import csv_table
from sweetspot.tune.result import StudyResult


@dataclass(frozen=True, slots=True)
class ReportFiles:
    html: Path  # report.html, self-contained
    pngs: tuple[Path, ...]  # the figures the study had data for, in page order
    trials_json: Path  # the full study
    trials_csv: Path  # one row per trial
    picks_json: Path  # baseline and picks with their configs


def build_report(study: StudyResult, out_dir: Path) -> ReportFiles:
    """Write trials.json, trials.csv, picks.json, the figures and report.html into ``out_dir``.

    A storage URL's password is masked in everything written.
    """
    from sweetspot.report.render import render_figures  # loads matplotlib: only when drawing

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    study = redacted(study)

    trials_json = out_dir / "trials.json"
    write_text(trials_json, json.dumps(study.to_dict(), indent=2) + "\n")

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


def picks_document(study: StudyResult) -> dict[str, Any]:
    """picks.json: the study's identity, the baseline and each pick with its trial's results.

    Each pick keeps the tuner's keys and gains ``config``, ``changes`` (vs the baseline),
    ``status`` and ``metrics`` from its trial, so the file alone is enough to deploy a pick.
    Everything in it is the study's JSON (``to_dict``), as trials.json has it.
    """
    data = study.to_dict()
    base = study.baseline_trial
    base_config = None if base is None else base.config
    picks = []
    for pick in study.picks:
        entry = pick.to_dict()
        trial = study.trial(pick.trial)
        if trial is not None:
            row = trial.to_dict()
            entry.update(config=row["config"], changes=changes_text(base_config, trial.config),
                         status=row["status"], metrics=row["metrics"])
        picks.append(entry)
    keys = ("study", "model", "gpu", "vllm_version", "workload", "backend", "objective", "slos")
    base_row = None if base is None else base.to_dict()
    return {
        **{k: data[k] for k in keys},
        "baseline": None if base_row is None else {
            "trial": base_row.get("number"), "config": base_row["config"],
            "status": base_row["status"], "metrics": base_row["metrics"],
        },
        "picks": picks,
        "confirmation": data["confirmation"],
    }
