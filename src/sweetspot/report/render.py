"""Thin matplotlib renderers: one figure-data object in, one PNG out.

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas, never through pyplot, so
rendering selects no GUI backend, keeps no global figure registry and is safe in any thread.
Importing this module loads matplotlib (about a second), so callers that only print tables
should not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sweetspot._files import atomic_path
from sweetspot.report.figures import (
    KnobGain,
    ParetoData,
    SpeculativeData,
    SweepData,
    knob_gains_data,
    max_model_len_data,
    pareto_data,
    policy_latency_data,
    speculative_data,
    sweeps,
)
from sweetspot.report.picks_figure import (
    BASELINE,
    BETTER,
    OVER_CAPACITY,
    SAME,
    SAME_WITHIN,
    UNRATED,
    WORSE,
    PicksData,
    picks_data,
)
from sweetspot.report.placement import Box, place_labels
from sweetspot.report.style import (
    BASE_COLOR,
    FAIL_COLOR,
    LATENCY_COLOR,
    MEMORY_COLOR,
    THROUGHPUT_COLOR,
    THROUGHPUT_LABEL,
    end_label,
    from_zero,
    legend_below,
    mark_baseline,
    pct,
    thousands,
    wrap,
    x_axis,
    x_of,
)
from sweetspot.tune.result import StudyResult

DPI = 110
SIZE = (7.5, 4.2)  # inches: every figure but the few below, which carry more
SIZES = {"picks.png": (8.0, 5.6), "pareto.png": (7.5, 5.0), "speculative.png": (8.0, 4.4)}
VERDICT_STYLE = {  # picks figure: (face colour, hatch, legend entry)
    BASELINE: (BASE_COLOR, None, "baseline"),
    BETTER: (MEMORY_COLOR, None, "better than baseline"),
    WORSE: (FAIL_COLOR, None, "worse than baseline"),
    SAME: (THROUGHPUT_COLOR, None, f"within {100 * SAME_WITHIN:g} % of baseline"),
    UNRATED: ("#9ecae1", None, "no comparable baseline value"),
    OVER_CAPACITY: ("#dddddd", "///", "over capacity: not comparable"),
}


def render_figures(study: StudyResult, out_dir: Path) -> tuple[Path, ...]:
    """Write every figure the study has data for into ``out_dir``; return their paths in order."""
    jobs: list[tuple[str, Any, Callable[[Any, Figure], None]]] = [
        ("max_model_len.png", max_model_len_data(study), _max_model_len),
        ("policy_latency.png", policy_latency_data(study), _policy_latency),
        ("speculative.png", speculative_data(study), _speculative),
        ("knob_gains.png", knob_gains_data(study), _knob_gains),
        ("picks.png", picks_data(study), _picks),
        ("pareto.png", pareto_data(study), _pareto),
        ("goodput.png", _goodput_data(study), _goodput),
    ]
    jobs += [(sweep_file_name(s.knob), s, _sweep) for s in sweeps(study)]
    paths = []
    for name, data, draw in jobs:
        if not data:
            continue
        fig = Figure(figsize=SIZES.get(name, SIZE), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)  # the figure's canvas: measures text for label placement
        draw(data, fig)
        path = out_dir / name
        with atomic_path(path) as tmp:  # no version in it: stable bytes
            fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
        paths.append(path)
    return tuple(paths)


def sweep_file_name(knob: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in knob)
    return f"sweep_{safe}.png"


def _max_model_len(data: SweepData, fig: Figure) -> None:
    ax = fig.add_subplot()
    xs = [p.value for p in data.points]
    ax.plot(xs, [p.output_throughput for p in data.points], "o-", color=THROUGHPUT_COLOR,
            label="output throughput")
    x_axis(ax, data)
    ax.set_ylabel(THROUGHPUT_LABEL)
    from_zero(ax)
    thousands(ax.yaxis)
    mark_baseline(ax, data)
    ax2 = None
    mem = [p for p in data.points if p.memory_gib is not None]
    if mem:
        ax2 = ax.twinx()
        ax2.plot([p.value for p in mem], [p.memory_gib for p in mem], "s--",
                 color=MEMORY_COLOR, label="memory used")
        ax2.set_ylabel("device memory (GiB)")
        from_zero(ax2)
    legend_below(fig, ax, ax2)
    ax.set_title("max-model-len: throughput and memory")


def _policy_latency(data: SweepData, fig: Figure) -> None:
    labels = [p.label for p in data.points]
    colors = [BASE_COLOR if p.is_baseline else LATENCY_COLOR for p in data.points]
    for i, (name, values) in enumerate((
        ("P99 TTFT (ms)", [p.p99_ttft_ms or 0.0 for p in data.points]),
        ("P99 E2EL (ms)", [p.p99_e2el_ms or 0.0 for p in data.points]),
    )):
        ax = fig.add_subplot(1, 2, i + 1)
        bars = ax.bar(labels, values, color=colors)
        ax.bar_label(bars, fmt="{:,.0f}")
        ax.margins(y=0.12)
        ax.set_ylabel(name)
        thousands(ax.yaxis)
        ax.set_xlabel("scheduling policy (gray: baseline)")
    fig.suptitle("Tail latency per scheduling policy")


def _speculative(data: SpeculativeData, fig: Figure) -> None:
    """Setups as rows (their labels are long), throughput left, TPOT right."""
    setups = data.setups
    ys = range(len(setups))
    ax, ax2 = fig.subplots(1, 2, sharey=True)
    ax.barh(ys, [s.output_throughput for s in setups],
            color=[BASE_COLOR] + [THROUGHPUT_COLOR] * (len(setups) - 1))
    for y, s in zip(ys, setups, strict=True):
        end_label(ax, y, s.output_throughput, f"{s.output_throughput:,.0f}"
                  + pct(s.throughput_change, " ({})"))
    ax.set_yticks(ys, [wrap(s.label) for s in setups])
    ax.invert_yaxis()
    ax.set_xlabel(THROUGHPUT_LABEL)
    centre = data.tpot_metric.split("_")[0]
    height = 0.38
    for shift, name, color, values, changes in (
        (-height / 2, f"{centre} TPOT", THROUGHPUT_COLOR, [s.tpot_ms for s in setups],
         [s.tpot_change for s in setups]),
        (height / 2, "P99 TPOT", LATENCY_COLOR, [s.p99_tpot_ms for s in setups],
         [s.p99_tpot_change for s in setups]),
    ):
        for y, value, change in zip(ys, values, changes, strict=True):
            if value is not None:
                ax2.barh(y + shift, value, height, color=color,
                         label=name if y == 0 else None)
                end_label(ax2, y + shift, value, f"{value:,.1f}" + pct(change, " ({})"),
                          size=7)
    ax2.set_xlabel("time per output token (ms)")
    for a in (ax, ax2):
        a.margins(x=0.38)
        a.set_xlim(left=0)
        thousands(a.xaxis)
    legend_below(fig, ax2)
    against = ("no speculation" if data.reference == "off"
               else f"the baseline ({data.reference})")
    fig.suptitle(f"Speculative decoding vs {against} (in brackets: change)")


def _knob_gains(gains: Sequence[KnobGain], fig: Figure) -> None:
    ax = fig.add_subplot()
    ordered = list(reversed(gains))  # barh draws bottom-up; best on top
    values = [g.gain_pct for g in ordered]
    ax.barh(range(len(ordered)), values,
            color=[THROUGHPUT_COLOR if v >= 0 else FAIL_COLOR for v in values])
    ax.set_yticks(range(len(ordered)), [f"{g.knob}\n{wrap('best: ' + g.label, 28)}"
                                        for g in ordered], fontsize=8)
    for i, g in enumerate(ordered):  # beyond the bar's end, on the side it grows to
        gain = g.gain_pct >= 0
        ax.annotate(f"{g.gain_pct:+.1f} %", (g.gain_pct, i), xytext=(4 if gain else -4, 0),
                    textcoords="offset points", va="center", ha="left" if gain else "right",
                    fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.margins(x=0.25)
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(lo, -1.0), max(hi, 1.0))  # all-zero gains still get a readable axis
    ax.set_xlabel("best value's output throughput vs baseline (%)")
    ax.set_title("Each knob's independent gain")


def _picks(data: PicksData, fig: Figure) -> None:
    """Small multiples: one panel per goal's number, a bar per pick, the baseline dotted."""
    axes = fig.subplots(2, 2, sharey=True).flat
    verdicts: dict[str, None] = {}
    for ax, panel in zip(axes, data.panels, strict=True):
        bars = panel.bars
        ys = range(len(bars))
        for y, bar in zip(ys, bars, strict=True):
            verdicts.setdefault(bar.verdict, None)
            if bar.value is not None:
                color, hatch, _ = VERDICT_STYLE[bar.verdict]
                ax.barh(y, bar.value, color=color, hatch=hatch, edgecolor="white"
                        if hatch is None else "#888888")
            end_label(ax, y, bar.value or 0.0, bar.text, size=7.5)
        if panel.reference is not None:
            ax.axvline(panel.reference, color="black", linestyle=":", linewidth=1)
        ax.set_yticks(ys, [f"{b.goal} (#{b.trial})" for b in bars])
        ax.margins(x=0.55)
        ax.set_xlim(left=0)
        thousands(ax.xaxis)
        m = panel.metric
        better = "higher" if m.higher_is_better else "lower"
        ax.set_title(f"{m.title} ({m.unit}), {better} is better", fontsize=9)
    axes[0].invert_yaxis()  # shared: the baseline on top everywhere
    handles = [Patch(facecolor=VERDICT_STYLE[v][0], hatch=VERDICT_STYLE[v][1],
                     edgecolor="#888888", label=VERDICT_STYLE[v][2])
               for v in VERDICT_STYLE if v in verdicts]
    handles.append(Line2D([], [], color="black", linestyle=":", label="baseline value"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8,
               frameon=False, title=wrap(data.note, 110) or None, title_fontsize=8)
    fig.suptitle("Each pick on every goal's number, against the baseline")


def _pareto(data: ParetoData, fig: Figure) -> None:
    ax = fig.add_subplot()
    for over, style in ((False, {"color": THROUGHPUT_COLOR, "alpha": 0.5, "label": "ok trial"}),
                        (True, {"facecolors": "none", "edgecolors": BASE_COLOR,
                                "label": "above capacity (latency not comparable)"})):
        points = [p for p in data.points if p.over_capacity == over]
        if points:
            ax.scatter([p.output_throughput for p in points], [p.p99_e2el_ms for p in points],
                       **style)
    if data.front:
        ax.plot([p.output_throughput for p in data.front], [p.p99_e2el_ms for p in data.front],
                "o-", color=LATENCY_COLOR, label="Pareto front")
    picked = [p for p in data.points if p.goals]
    ax.scatter([p.output_throughput for p in picked], [p.p99_e2el_ms for p in picked],
               s=80, facecolors="none", edgecolors="black", linewidths=1.2, label="pick")
    ax.margins(x=0.08, y=0.1)
    ax.set_xlabel(THROUGHPUT_LABEL)
    ax.set_ylabel("P99 E2EL (ms)")
    thousands(ax.xaxis, ax.yaxis)
    ax.set_title("Throughput vs tail latency")
    legend = ax.legend(loc="best", fontsize=8)
    if data.failed:
        shown = ", ".join(f"#{n} {status}" for n, status in data.failed[:8])
        more = f" and {len(data.failed) - 8} more" if len(data.failed) > 8 else ""
        fig.supxlabel(f"Not plotted (failed): {shown}{more}", fontsize=8, color=FAIL_COLOR)
    _label_points(fig, ax, picked, [p.label for p in picked], legend)


def _label_points(fig: Figure, ax: Any, points: Sequence[Any], texts: Sequence[str],
                  legend: Any) -> None:
    """Name each point beside it where no other name, point or the legend is (placement.py).

    Placement works in pixels, so the layout is fixed first; a label moved away from its point
    gets a thin leader line back to it.
    """
    if not points:
        return
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    anchors = [tuple(to_px((p.output_throughput, p.p99_e2el_ms))) for p in points]
    sizes = []
    for text in texts:
        probe = ax.text(0, 0, text, fontsize=8)
        extent = probe.get_window_extent(renderer)
        sizes.append((extent.width + 4, extent.height + 2))
        probe.remove()
    marker = 7.0  # half a pick's ring, pixels
    obstacles = [Box(x - marker, y - marker, x + marker, y + marker)
                 for x, y in (to_px(xy) for c in ax.collections for xy in c.get_offsets())]
    frame = legend.get_window_extent(renderer)
    obstacles.append(Box(frame.x0, frame.y0, frame.x1, frame.y1))
    b = ax.bbox
    offsets = place_labels(anchors, sizes, Box(b.x0, b.y0, b.x1, b.y1), obstacles, gap=9)
    px_to_pt = 72.0 / fig.dpi
    for point, text, (w, h), (dx, dy) in zip(points, texts, sizes, offsets, strict=True):
        far = max(abs(dx) - w / 2, abs(dy) - h / 2) > 12  # the near edge, in pixels
        ax.annotate(text, (point.output_throughput, point.p99_e2el_ms),
                    xytext=(dx * px_to_pt, dy * px_to_pt), textcoords="offset points",
                    ha="center", va="center", fontsize=8,
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                    arrowprops={"arrowstyle": "-", "color": "#666666", "linewidth": 0.6,
                                "shrinkA": 0, "shrinkB": 4} if far else None)


def _goodput_data(study: StudyResult) -> Mapping[str, Any] | None:
    search = study.rate_search
    return search if search and "error" not in search and search.get("probes") else None


def _goodput(search: Mapping[str, Any], fig: Figure) -> None:
    """Each SLO'd latency as a share of its limit against the offered rate: the goodput
    capacity is the highest rate whose every line stays under 1."""
    ax = fig.add_subplot()
    probes = sorted(search["probes"], key=lambda p: p["rate"])
    for key, limit in search["slos"].items():
        points = [(p["rate"], p["metrics"][key] / limit) for p in probes
                  if key in (p.get("metrics") or {})]
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], "o-",
                    label=f"{key.removesuffix('_ms').replace('_', ' ').upper()} / {limit:g} ms")
    failed = [p["rate"] for p in probes if not p.get("metrics")]  # the server failed first
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color=FAIL_COLOR, clip_on=False,
                label="server failed")
    ax.axhline(1.0, color=FAIL_COLOR, linestyle="--", linewidth=1, label="SLO limit")
    best = search.get("max_rate")
    if best is not None:
        ax.axvline(best, color=MEMORY_COLOR, linestyle=":", label=f"goodput {best:.2f} req/s")
    ax.axvline(search["capacity_rps"], color=BASE_COLOR, linestyle="-.", linewidth=1,
               label=f"capacity {search['capacity_rps']:.2f} req/s")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("latency / its SLO limit")
    ax.set_ylim(bottom=0)
    legend_below(fig, ax)
    ax.set_title(f"Goodput: trial {search['trial']} at rising request rates")


def _sweep(data: SweepData, fig: Figure) -> None:
    ax = fig.add_subplot()
    ok = [p for p in data.points if p.output_throughput is not None]
    ax.plot([x_of(data, p) for p in ok], [p.output_throughput for p in ok], "o-",
            color=THROUGHPUT_COLOR, label="output throughput")
    ax.set_ylabel(THROUGHPUT_LABEL)
    from_zero(ax)
    x_axis(ax, data)
    ax2 = ax.twinx()
    lat = [p for p in ok if p.p99_e2el_ms is not None]
    ax2.plot([x_of(data, p) for p in lat], [p.p99_e2el_ms for p in lat], "s--",
             color=LATENCY_COLOR, label="P99 E2EL")
    ax2.set_ylabel("P99 E2EL (ms)")
    from_zero(ax2)
    thousands(ax.yaxis, ax2.yaxis)
    for p in data.points:
        if p.status != "ok":
            x = x_of(data, p)
            ax.plot(x, 0, "x", color=FAIL_COLOR, markersize=10, mew=2,
                    transform=ax.get_xaxis_transform(), clip_on=False)
            ax.annotate(p.status, (x, 0), xycoords=ax.get_xaxis_transform(), xytext=(0, 8),
                        textcoords="offset points", ha="center", color=FAIL_COLOR)
    mark_baseline(ax, data)
    legend_below(fig, ax, ax2)
    ax.set_title(f"{data.knob}: one knob at a time")
