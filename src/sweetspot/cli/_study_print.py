"""The one printer of a finished study, for `tune` (the study it just ran) and `report` (a
stored one), and the lines `tune` adds when every trial failed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from sweetspot.cli._common import _BUNCHED, _err, _out
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version

if TYPE_CHECKING:
    from sweetspot.tune.result import PickResult, StudyResult, TrialResult


def print_study(data: StudyResult, *, elapsed_s: float | None = None) -> None:
    """A study on the terminal.

    Just run (``tune`` gives ``elapsed_s``): what ran and in how long, the SLOs, a compact picks
    table (capacity, P99 TTFT and TPOT at the offered rate, gain), each pick's command and
    reasons, the finalists, a burst warning on stderr, and the rate search's table and verdict.
    Read back (``report``, no ``elapsed_s``): the report's own tables (``terminal_tables``):
    the picks' numbers and what each changes, the rate search, one table per swept knob.
    """
    if elapsed_s is None:
        from sweetspot.report import terminal_tables

        for table in terminal_tables(data):
            _out.print(table)
        return
    _print_run(data, elapsed_s)
    _print_picks(data)
    bunched = [r.number for r in data.trials if r.facts.get("bunched_streams")]
    if bunched:
        _err.print(f"warning: in trial{'s' if len(bunched) > 1 else ''} "
                   f"{', '.join(map(str, bunched))} the streams arrived in bursts: {_BUNCHED}",
                   markup=False)
    if data.rate_search:
        _print_rate_search(data.rate_search)


def _print_run(data: StudyResult, elapsed_s: float) -> None:
    """What ran: the study, model, GPU, release, workload and backend, trials and time; the
    SLOs and how the offered rate was chosen."""
    from sweetspot.backends.vllm.server import weights_of

    rows = data.trials
    failed = sum(r.status != "ok" for r in rows)
    backend = data.backend or "-"
    if backend == "vllm":  # which weights the trials ran on: the servers' own options say
        args = (data.settings.get("vllm") or {}).get("args") or ()
        backend += f" ({weights_of(args)} weights)"
    _out.print(f"sweetspot tune: study {data.study} — {data.model} on {data.gpu}, "
               f"vLLM {data.vllm_version}, workload {data.workload!r}, backend "
               f"{backend}: {len(rows)} trials ({failed} failed) in {elapsed_s:.1f} s",
               markup=False)
    if data.slos:
        _out.print("SLOs: " + ", ".join(f"{k} <= {v:g} ms" for k, v in data.slos.items()),
                   markup=False)
    if data.rate_note:
        _out.print(data.rate_note, markup=False)


def _print_picks(data: StudyResult) -> None:
    """The baseline and the picks in one table, then each pick's command and reasons."""
    base = data.baseline_trial
    shown: list[tuple[str, TrialResult]] = (
        [("(baseline)", base)] if base is not None and base.metrics else [])
    shown += [(pick.goal, trial) for pick in data.picks
              if (trial := data.trial(pick.trial)) is not None]
    _out.print(_picks_table(data, shown))
    if any(row.over_capacity for _, row in shown):
        _out.print("over: over capacity at the offered rate — the queue grows with the run, so "
                   "its latencies are not comparable", markup=False)
    if not data.picks and not data.rate_search:
        _out.print("no configuration met the SLOs; see the trials in the report" if data.slos
                   else "no configuration served every request; see the trials in the report",
                   markup=False)
    for pick in data.picks:
        _out.print(f"\n[bold]{pick.goal}[/bold] (trial {pick.trial})")
        _out.print(pick.command, markup=False)
        for reason in pick.reasons:
            _out.print(f"  - {reason}", markup=False)
    if data.confirmation:
        _out.print(f"\nfinalists: {data.confirmation['text']}", markup=False)


def _picks_table(data: StudyResult, shown: list[tuple[str, TrialResult]]) -> Table:
    rate = data.offered_rate or next(
        (r.offered_rate for r in data.trials if r.offered_rate), None)
    at = f"{rate:.3g} req/s" if rate else "the workload's rate"
    table = Table(title=f"picks: capacity at steady state; P99 latency in ms at {at}")
    table.add_column("goal", no_wrap=True)
    for column in ("trial", "tok/s", "req/s", "TTFT", "TPOT", "GiB", "gain"):
        table.add_column(column, justify="right", no_wrap=True)
    picks: dict[str, PickResult] = {p.goal: p for p in data.picks}
    for label, row in shown:
        m = row.metrics
        over = row.over_capacity
        gain = None if label == "(baseline)" else picks[label].gain.get("output_throughput")
        table.add_row(label, str(row.number), f"{m['output_throughput']:,.0f}",
                      f"{m.get('request_throughput', 0):.2f}",
                      "over" if over else f"{m['p99_ttft_ms']:,.0f}",
                      "over" if over else f"{m['p99_tpot_ms']:,.1f}",
                      _gib(row.memory_bytes), "" if gain is None else f"{gain:+.0%}")
    return table


def _print_rate_search(search) -> None:
    from sweetspot.report.tables import goodput_table, goodput_text

    if "error" not in search:
        _out.print(goodput_table(search))
    _out.print(goodput_text(search), markup=False)


def _gib(value) -> str:
    return "-" if value is None else f"{value / GiB:.1f}"


def all_failed(data: StudyResult) -> list[str]:
    """When no trial ran: how the trials failed, and when memory was the cause, on how many
    GPUs the baseline would start (the memory model's finding)."""
    from collections import Counter

    from sweetspot.engine.memory import fit_finding
    from sweetspot.spec.model import checkpoint_quantization, load_model
    from sweetspot.tune.tuner import config_from_json

    rows = data.trials
    if not rows or any(r.status == "ok" for r in rows):
        return []
    counts = Counter(r.status for r in rows)
    first = {r.status: r.cause for r in reversed(rows)}
    lines = ["every trial failed: " + "; ".join(
        f"{n} {status} (e.g. {' '.join(str(first[status]).split())})"
        for status, n in counts.most_common())]
    settings = data.settings
    ooms = [r for r in rows if r.status == "oom"]
    base = next((r for r in ooms if r.number == data.baseline), ooms[0] if ooms else None)
    if base is None or settings.get("backend") == "endpoint":
        return lines
    resolved = load_model(settings["model"])
    quant = checkpoint_quantization(settings["model"], resolved, load_quantization(
        settings["quant"]) if settings.get("quant") else None)
    unfit = fit_finding(resolved.arch, quant, load_hardware(settings["gpu"]),
                        config_from_json(base.config),
                        parse_vllm_version(settings["vllm_version"]))
    if unfit is not None:
        tp = unfit.tensor_parallel_size
        lines.append(unfit.message + (
            f" (tune that with --baseline \"vllm serve {settings['model']} "
            f"--tensor-parallel-size {tp}\")" if tp else ""))
    return lines
