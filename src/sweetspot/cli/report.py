"""`sweetspot report` (every table of a stored study), and the picks table `tune` prints when it
ends."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot.cli._common import (
    _BUNCHED,
    _check_name,
    _err,
    _out,
    _write_report,
    app,
)
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="Study name in the storage.")],
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")] = None,
    out: Annotated[Path | None, typer.Option(help="Report folder (default "
                                                  ".sweetspot/reports/STUDY).")] = None,
) -> int:
    """Tables, figures, HTML, JSON and CSV of a stored study."""
    from sweetspot.report import terminal_tables
    from sweetspot.tune.result import StudyResult
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import study_data

    if out is None:
        _check_name(study, "study")
    url = storage or default_storage_url()
    data = study_data(StudyStore.load(url, study), url)
    for table in terminal_tables(StudyResult.from_dict(data)):
        _out.print(table)
    _write_report(data, out or Path(".sweetspot") / "reports" / study)
    return 0


def _print_study(data: dict, elapsed_s: float) -> None:
    from sweetspot.backends.vllm.server import weights_of

    rows = data["trials"]
    failed = sum(r["status"] != "ok" for r in rows)
    backend = data["backend"]
    if backend == "vllm":  # which weights the trials ran on: the servers' own options say
        args = ((data.get("settings") or {}).get("vllm") or {}).get("args") or ()
        backend += f" ({weights_of(args)} weights)"
    _out.print(f"sweetspot tune: study {data['study']} — {data['model']} on {data['gpu']}, "
               f"vLLM {data['vllm_version']}, workload {data['workload']!r}, backend "
               f"{backend}: {len(rows)} trials ({failed} failed) in {elapsed_s:.1f} s",
               markup=False)
    if data["slos"]:
        _out.print("SLOs: " + ", ".join(f"{k} <= {v:g} ms" for k, v in data["slos"].items()),
                   markup=False)
    if data.get("rate_note"):
        _out.print(data["rate_note"], markup=False)
    by_number = {r["number"]: r for r in rows}
    base = by_number.get(data["baseline"])
    rate = data.get("offered_rate") or next(
        (r.get("offered_rate") for r in rows if r.get("offered_rate")), None)
    at = f"{rate:.3g} req/s" if rate else "the workload's rate"
    table = Table(title=f"picks: capacity at steady state; P99 latency in ms at {at}")
    table.add_column("goal", no_wrap=True)
    for column in ("trial", "tok/s", "req/s", "TTFT", "TPOT", "GiB", "gain"):
        table.add_column(column, justify="right", no_wrap=True)
    shown = ([("(baseline)", base)] if base is not None and base["metrics"] else []) + [
        (pick["goal"], by_number[pick["trial"]]) for pick in data["picks"]]
    for label, row in shown:
        m = row["metrics"]
        over = row.get("over_capacity")
        gain = None if label == "(baseline)" else next(
            p for p in data["picks"] if p["goal"] == label)["gain"].get("output_throughput")
        table.add_row(label, str(row["number"]), f"{m['output_throughput']:,.0f}",
                      f"{m.get('request_throughput', 0):.2f}",
                      "over" if over else f"{m['p99_ttft_ms']:,.0f}",
                      "over" if over else f"{m['p99_tpot_ms']:,.1f}",
                      _gib(row.get("memory_bytes")), "" if gain is None else f"{gain:+.0%}")
    _out.print(table)
    if any(row.get("over_capacity") for _, row in shown):
        _out.print("over: over capacity at the offered rate — the queue grows with the run, so "
                   "its latencies are not comparable", markup=False)
    if not data["picks"] and not data.get("rate_search"):
        _out.print("no configuration met the SLOs; see the trials in the report" if data["slos"]
                   else "no configuration served every request; see the trials in the report",
                   markup=False)
    for pick in data["picks"]:
        _out.print(f"\n[bold]{pick['goal']}[/bold] (trial {pick['trial']})")
        _out.print(pick["command"], markup=False)
        for reason in pick["reasons"]:
            _out.print(f"  - {reason}", markup=False)
    if data.get("confirmation"):
        _out.print(f"\nfinalists: {data['confirmation']['text']}", markup=False)
    bunched = [r["number"] for r in rows if (r.get("facts") or {}).get("bunched_streams")]
    if bunched:
        _err.print(f"warning: in trial{'s' if len(bunched) > 1 else ''} "
                   f"{', '.join(map(str, bunched))} the streams arrived in bursts: {_BUNCHED}",
                   markup=False)
    if data.get("rate_search"):
        _print_rate_search(data["rate_search"])


def _all_failed(data: dict) -> list[str]:
    """When no trial ran: how the trials failed, and when memory was the cause, on how many
    GPUs the baseline would start (the memory model's finding)."""
    from collections import Counter

    from sweetspot.engine.memory import fit_finding
    from sweetspot.spec.model import checkpoint_quantization, load_model
    from sweetspot.tune.tuner import config_from_json

    rows = data["trials"]
    if not rows or any(r["status"] == "ok" for r in rows):
        return []
    counts = Counter(r["status"] for r in rows)
    first = {r["status"]: r["cause"] for r in reversed(rows)}
    lines = ["every trial failed: " + "; ".join(
        f"{n} {status} (e.g. {' '.join(str(first[status]).split())})"
        for status, n in counts.most_common())]
    settings = data["settings"]
    ooms = [r for r in rows if r["status"] == "oom"]
    base = next((r for r in ooms if r["number"] == data["baseline"]), ooms[0] if ooms else None)
    if base is None or settings.get("backend") == "endpoint":
        return lines
    resolved = load_model(settings["model"])
    quant = checkpoint_quantization(settings["model"], resolved, load_quantization(
        settings["quant"]) if settings.get("quant") else None)
    unfit = fit_finding(resolved.arch, quant, load_hardware(settings["gpu"]),
                        config_from_json(base["config"]),
                        parse_vllm_version(settings["vllm_version"]))
    if unfit is not None:
        tp = unfit.tensor_parallel_size
        lines.append(unfit.message + (
            f" (tune that with --baseline \"vllm serve {settings['model']} "
            f"--tensor-parallel-size {tp}\")" if tp else ""))
    return lines


def _print_rate_search(search: dict) -> None:
    from sweetspot.report.tables import goodput_table, goodput_text

    if "error" not in search:
        _out.print(goodput_table(search))
    _out.print(goodput_text(search), markup=False)


def _gib(value) -> str:
    return "-" if value is None else f"{value / GiB:.1f}"
