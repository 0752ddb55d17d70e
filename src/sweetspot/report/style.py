"""What every figure shares: colours, a few labels, and the axis helpers the renderers call
(ticks, legends, bar-end labels, a y axis from zero).

Loaded with matplotlib, by ``render`` only.
"""

from __future__ import annotations

import textwrap
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from sweetspot.report.figures import SweepData
from sweetspot.report.picks_figure import percent
from sweetspot.report.study import knob_axis_label

__all__ = [
    "BASE_COLOR",
    "FAIL_COLOR",
    "LATENCY_COLOR",
    "MEMORY_COLOR",
    "THROUGHPUT_COLOR",
    "THROUGHPUT_LABEL",
    "WRAP",
    "end_label",
    "from_zero",
    "legend_below",
    "mark_baseline",
    "pct",
    "slant",
    "thousands",
    "wrap",
    "x_axis",
    "x_of",
]

THROUGHPUT_COLOR, LATENCY_COLOR, MEMORY_COLOR, FAIL_COLOR, BASE_COLOR = (
    "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:gray")
THROUGHPUT_LABEL = "output throughput (tok/s)"
WRAP = 18  # characters per line of a long category label


def x_of(data: SweepData, point: Any) -> float:
    """A sweep point's x: its value on a numeric axis, its position on a categorical one."""
    return point.value if data.numeric else data.points.index(point)


def x_axis(ax: Any, data: SweepData) -> None:
    labels = [p.label for p in data.points]
    if data.numeric:
        if data.log_x:
            ax.set_xscale("log", base=2)
        ax.set_xticks([p.value for p in data.points], labels)
        ax.minorticks_off()
        if max(map(len, labels), default=0) > 8 or len(labels) > 6:
            slant(ax)
    else:
        ax.set_xticks(range(len(data.points)), [wrap(label) for label in labels])
        ax.set_xlim(-0.5, len(data.points) - 0.5)
    ax.set_xlabel(knob_axis_label(data.knob))


def slant(ax: Any) -> None:
    for label in ax.get_xticklabels():
        label.set(rotation=20, ha="right", rotation_mode="anchor")


def wrap(text: str, width: int = WRAP) -> str:
    """Long labels on several lines, broken between words only (never inside a number)."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def mark_baseline(ax: Any, data: SweepData) -> None:
    base = next((p for p in data.points if p.is_baseline), None)
    if base is not None:
        ax.axvline(x_of(data, base), color=BASE_COLOR, linestyle=":", label="baseline")


def legend_below(fig: Figure, *axes: Any) -> None:
    """One legend for every axis (twin axes included), under the plot: it never hides data."""
    handles, labels = [], []
    for ax in axes:
        if ax is not None:
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
               fontsize=8, frameon=False)


def end_label(ax: Any, y: float, x: float, text: str, size: float = 8) -> None:
    """``text`` just right of a horizontal bar ending at ``x``."""
    ax.annotate(text, (x, y), xytext=(3, 0), textcoords="offset points", va="center",
                fontsize=size)


def from_zero(ax: Any) -> None:
    """A y axis from 0 with headroom above the highest point, so no marker is cut in half."""
    top = max((max(line.get_ydata(), default=0.0) for line in ax.get_lines()
               if len(line.get_ydata()) and line.get_transform() == ax.transData),
              default=1.0)
    ax.set_ylim(0, 1.08 * top if top > 0 else 1.0)


def thousands(*axes: Any) -> None:
    """Tick labels with thousands separators: 34,000 reads faster than 34000."""
    for axis in axes:
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))


def pct(change: float | None, template: str = "{}") -> str:
    """A relative change as ``template`` fills it, or nothing when there is none."""
    return "" if change is None else template.format(percent(change))
