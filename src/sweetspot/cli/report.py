"""`sweetspot report`: every table of a stored study, and its report files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sweetspot.cli._common import _check_name, _write_report, app
from sweetspot.cli._study_print import print_study


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="Study name in the storage.")],
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")] = None,
    out: Annotated[Path | None, typer.Option(help="Report folder (default "
                                                  ".sweetspot/reports/STUDY).")] = None,
) -> int:
    """Tables, figures, HTML, JSON and CSV of a stored study."""
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import study_data

    if out is None:
        _check_name(study, "study")
    url = storage or default_storage_url()
    data = study_data(StudyStore.load(url, study), url)
    print_study(data)
    _write_report(data, out or Path(".sweetspot") / "reports" / study)
    return 0

