"""Turn a finished study into what people read: terminal tables, figures, one HTML page, exports.

Everything takes the ``StudyResult`` that ``sweetspot tune`` records (``StudyResult.from_dict``
reads a stored study's JSON or a saved trials.json); it becomes JSON again only where the report
writes trials.json and picks.json. The figure data (``figures``) and table rows (``tables``) are
pure and tested; ``render`` draws them with matplotlib, which only ``build_report`` loads.
"""

from sweetspot.report.build import ReportFiles, build_report, picks_document
from sweetspot.report.figures import (
    KnobGain,
    ParetoData,
    ParetoPoint,
    SpeculativeData,
    SpeculativeSetup,
    SweepData,
    SweepPoint,
    knob_gains_data,
    max_model_len_data,
    pareto_data,
    policy_latency_data,
    speculative_data,
    sweep_data,
    sweeps,
)
from sweetspot.report.html import render_html
from sweetspot.report.picks_figure import (
    GoalMetric,
    PickBar,
    PicksData,
    PicksPanel,
    picks_data,
)
from sweetspot.report.tables import PickRow, csv_table, pick_rows, terminal_tables

__all__ = [
    "GoalMetric",
    "KnobGain",
    "ParetoData",
    "ParetoPoint",
    "PickBar",
    "PickRow",
    "PicksData",
    "PicksPanel",
    "ReportFiles",
    "SpeculativeData",
    "SpeculativeSetup",
    "SweepData",
    "SweepPoint",
    "build_report",
    "csv_table",
    "knob_gains_data",
    "max_model_len_data",
    "pareto_data",
    "pick_rows",
    "picks_data",
    "picks_document",
    "policy_latency_data",
    "render_html",
    "speculative_data",
    "sweep_data",
    "sweeps",
    "terminal_tables",
]
