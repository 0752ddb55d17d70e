"""Thin matplotlib renderers: one figure-data object in, one PNG out.

Figures are built on ``matplotlib.figure.Figure`` directly, never through pyplot, so rendering
selects no GUI backend, keeps no global figure registry and is safe in any thread; PNGs are
written by the Agg canvas. Importing this module loads matplotlib (about a second), so callers
that only print tables should not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from sweetspot.report.figures import (
    Bar,
    KnobGain,
    ParetoData,
    SpeculativeData,
    SweepData,
    knob_gains_data,
    max_model_len_data,
    pareto_data,
    picks_data,
    policy_latency_data,
    speculative_data,
    sweeps,
)

DPI = 110
THROUGHPUT_COLOR, LATENCY_COLOR, MEMORY_COLOR, FAIL_COLOR, BASE_COLOR = (
    "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:gray")
THROUGHPUT_LABEL = "output throughput (tok/s)"


def render_figures(study: Mapping[str, Any], out_dir: Path) -> tuple[Path, ...]:
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
        fig = Figure(figsize=(7.5, 4.2), layout="constrained")
        draw(data, fig)
        path = out_dir / name
        fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version: stable bytes
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
    _x_axis(ax, data)
    ax.set_ylabel(THROUGHPUT_LABEL)
    ax.set_ylim(bottom=0)
    _mark_baseline(ax, data)
    handles = ax.get_legend_handles_labels()
    mem = [p for p in data.points if p.memory_gib is not None]
    if mem:
        ax2 = ax.twinx()
        ax2.plot([p.value for p in mem], [p.memory_gib for p in mem], "s--",
                 color=MEMORY_COLOR, label="memory used")
        ax2.set_ylabel("device memory (GiB)")
        ax2.set_ylim(bottom=0)
        handles = _merged(ax, ax2)
    ax.legend(*handles, loc="lower right")
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
        ax.bar_label(bars, fmt="%.0f")
        ax.set_ylabel(name)
        ax.set_xlabel("scheduling policy (gray: baseline)")
    fig.suptitle("Tail latency per scheduling policy")


def _speculative(data: SpeculativeData, fig: Figure) -> None:
    labels = [s.label for s in data.setups]
    ax = fig.add_subplot(1, 2, 1)
    colors = [BASE_COLOR] + [THROUGHPUT_COLOR] * (len(labels) - 1)
    bars = ax.bar(labels, [s.output_throughput for s in data.setups], color=colors)
    ax.bar_label(bars, labels=[_pct(s.throughput_change) for s in data.setups])
    ax.set_ylabel(THROUGHPUT_LABEL)
    _slant(ax)
    ax = fig.add_subplot(1, 2, 2)
    width = 0.4
    centre_name = data.tpot_metric.split("_")[0]
    for offset, name, values, changes in (
        (-width / 2, f"{centre_name} TPOT", [s.tpot_ms for s in data.setups],
         [s.tpot_change for s in data.setups]),
        (width / 2, "P99 TPOT", [s.p99_tpot_ms for s in data.setups],
         [s.p99_tpot_change for s in data.setups]),
    ):
        xs = [i + offset for i in range(len(labels))]
        bars = ax.bar(xs, [v or 0.0 for v in values], width, label=name)
        ax.bar_label(bars, labels=[_pct(c) for c in changes], fontsize=7)
    ax.set_xticks(range(len(labels)), labels)
    _slant(ax)
    ax.set_ylabel("TPOT (ms)")
    ax.legend()
    against = ("no speculation" if data.reference == "off"
               else f"the baseline ({data.reference})")
    fig.suptitle(f"Speculative decoding vs {against} (bar labels: change)")


def _knob_gains(gains: Sequence[KnobGain], fig: Figure) -> None:
    ax = fig.add_subplot()
    ordered = list(reversed(gains))  # barh draws bottom-up; best on top
    values = [g.gain_pct for g in ordered]
    ax.barh([g.knob for g in ordered], values,
            color=[THROUGHPUT_COLOR if v >= 0 else FAIL_COLOR for v in values])
    for i, g in enumerate(ordered):  # right of the bar, or of zero for a loss: never on a name
        ax.annotate(f"{g.gain_pct:+.1f} % ({g.label})", (max(g.gain_pct, 0.0), i),
                    xytext=(4, 0), textcoords="offset points", va="center")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.margins(x=0.25)
    ax.set_xlabel("best value's output throughput vs baseline (%)")
    ax.set_title("Each knob's independent gain")


def _picks(bars_data: Sequence[Bar], fig: Figure) -> None:
    labels = [b.label for b in bars_data]
    colors = [BASE_COLOR] + [THROUGHPUT_COLOR] * (len(labels) - 1)
    for i, (name, values) in enumerate((
        (THROUGHPUT_LABEL, [b.output_throughput or 0.0 for b in bars_data]),
        ("P99 E2EL (ms)", [b.p99_e2el_ms or 0.0 for b in bars_data]),
    )):
        ax = fig.add_subplot(1, 2, i + 1)
        bars = ax.bar(labels, values, color=colors if i == 0 else
                      [BASE_COLOR] + [LATENCY_COLOR] * (len(labels) - 1))
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_ylabel(name)
        _slant(ax)
    fig.suptitle("Before and after: baseline vs each pick")


def _pareto(data: ParetoData, fig: Figure) -> None:
    ax = fig.add_subplot()
    ax.scatter([p.output_throughput for p in data.points], [p.p99_e2el_ms for p in data.points],
               color=THROUGHPUT_COLOR, alpha=0.5, label="ok trial")
    if data.front:
        ax.plot([p.output_throughput for p in data.front], [p.p99_e2el_ms for p in data.front],
                "o-", color=LATENCY_COLOR, label="Pareto front")
    for p in data.points:
        if p.goals:
            ax.annotate(", ".join(p.goals), (p.output_throughput, p.p99_e2el_ms),
                        xytext=(5, 5), textcoords="offset points", fontsize=8)
    n = len(data.failed)
    for i, (number, status) in enumerate(data.failed):
        # Failed trials have no throughput: a rug on the bottom axis, spread in trial order.
        x = (i + 1) / (n + 1)
        ax.plot(x, 0, "x", color=FAIL_COLOR, transform=ax.transAxes, clip_on=False,
                label="failed (x: trial order)" if i == 0 else None)
        ax.annotate(f"#{number} {status}", (x, 0), xycoords="axes fraction", xytext=(0, 6),
                    textcoords="offset points", ha="center", fontsize=7, color=FAIL_COLOR)
    ax.margins(x=0.15, y=0.1)  # room for goal names beside the outermost points
    ax.set_xlabel(THROUGHPUT_LABEL)
    ax.set_ylabel("P99 E2EL (ms)")
    ax.legend(loc="upper left")
    ax.set_title("Throughput vs tail latency")


def _goodput_data(study: Mapping[str, Any]) -> Mapping[str, Any] | None:
    search = study.get("rate_search")
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
    for p in probes:
        if not p.get("metrics"):  # the server failed before this rate ran
            ax.plot(p["rate"], 0, "x", color=FAIL_COLOR, clip_on=False)
    ax.axhline(1.0, color=FAIL_COLOR, linestyle="--", linewidth=1, label="SLO limit")
    best = search.get("max_rate")
    if best is not None:
        ax.axvline(best, color=MEMORY_COLOR, linestyle=":", label=f"goodput {best:.2f} req/s")
    ax.axvline(search["capacity_rps"], color=BASE_COLOR, linestyle=":",
               label=f"capacity {search['capacity_rps']:.2f} req/s")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("latency / SLO limit")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"Goodput: trial {search['trial']} at rising request rates")


def _sweep(data: SweepData, fig: Figure) -> None:
    ax = fig.add_subplot()
    ok = [p for p in data.points if p.output_throughput is not None]
    ax.plot([_x(data, p) for p in ok], [p.output_throughput for p in ok], "o-",
            color=THROUGHPUT_COLOR, label="output throughput")
    ax.set_ylabel(THROUGHPUT_LABEL)
    ax.set_ylim(bottom=0)
    _x_axis(ax, data)
    ax2 = ax.twinx()
    lat = [p for p in ok if p.p99_e2el_ms is not None]
    ax2.plot([_x(data, p) for p in lat], [p.p99_e2el_ms for p in lat], "s--",
             color=LATENCY_COLOR, label="P99 E2EL")
    ax2.set_ylabel("P99 E2EL (ms)")
    ax2.set_ylim(bottom=0)
    for p in data.points:
        if p.status != "ok":
            x = _x(data, p)
            ax.plot(x, 0, "x", color=FAIL_COLOR, markersize=10, mew=2,
                    transform=ax.get_xaxis_transform(), clip_on=False)
            ax.annotate(p.status, (x, 0), xycoords=ax.get_xaxis_transform(), xytext=(0, 8),
                        textcoords="offset points", ha="center", color=FAIL_COLOR)
    _mark_baseline(ax, data)
    ax.legend(*_merged(ax, ax2), loc="best")
    ax.set_title(f"{data.knob}: one knob at a time")


def _x(data: SweepData, point: Any) -> float:
    return point.value if data.numeric else data.points.index(point)


def _x_axis(ax: Any, data: SweepData) -> None:
    if data.numeric:
        if data.log_x:
            ax.set_xscale("log", base=2)
        ax.set_xticks([p.value for p in data.points], [p.label for p in data.points])
    else:
        ax.set_xticks(range(len(data.points)), [p.label for p in data.points])
        ax.set_xlim(-0.5, len(data.points) - 0.5)
    if max((len(p.label) for p in data.points), default=0) > 8 or len(data.points) > 6:
        _slant(ax)
    ax.set_xlabel(data.knob)


def _slant(ax: Any) -> None:
    for label in ax.get_xticklabels():
        label.set(rotation=20, ha="right", rotation_mode="anchor")


def _mark_baseline(ax: Any, data: SweepData) -> None:
    base = next((p for p in data.points if p.is_baseline), None)
    if base is not None:
        ax.axvline(_x(data, base), color=BASE_COLOR, linestyle=":", label="baseline")


def _merged(ax: Any, ax2: Any) -> tuple[list, list]:
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    return h1 + h2, l1 + l2


def _pct(change: float | None) -> str:
    return "" if change is None else f"{100 * change:+.1f} %"
