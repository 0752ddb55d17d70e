"""The ``sweetspot`` command: a thin Typer layer over the packages.

Every command turns its options into specs at this edge, calls one function, and renders the
result. Bad input raises ``SweetspotError`` (or a Click usage error) and ends here as one line on
stderr with exit code 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.spec.hardware import GiB, gpu_names, load_hardware
from sweetspot.spec.knobs import resolve_defaults
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.model import model_names
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version
from sweetspot.spec.workload import PRESETS, ArrivalSpec, workload_stats

app = typer.Typer(
    name="sweetspot",
    help="Find the best launch configuration of a vLLM deployment for a GPU, model and traffic.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_out = Console(highlight=False, soft_wrap=True)

VersionOpt = Annotated[
    str, typer.Option("--vllm-version", help=f"Target vLLM release (default "
                                             f"{DEFAULT_VLLM_VERSION}).")
]
ModelOpt = Annotated[str, typer.Option(help="Catalog name, HF id or folder with config.json.")]
WorkloadOpt = Annotated[str, typer.Option(help=f"Preset ({', '.join(PRESETS)}) or YAML/JSON "
                                               "file.")]
YamlDirOpt = Annotated[Path | None, typer.Option(help="Also write one vLLM YAML config per goal "
                                                      "here.")]


@app.command()
def lint(
    command: Annotated[str, typer.Argument(help='The command line: "vllm serve MODEL ..."')],
    vllm_version: VersionOpt = str(DEFAULT_VLLM_VERSION),
    gpu: Annotated[str | None, typer.Option(help="GPU to check memory against.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> int:
    """Check a vllm serve command line against a vLLM release (and a GPU); print a corrected one.

    Exit 0: clean (warnings allowed); 1: problems found; 2: unusable input.
    """
    from sweetspot.engine.lint import lint_command

    version = parse_vllm_version(vllm_version)
    hardware = load_hardware(gpu) if gpu else None
    report = lint_command(command, version, hardware)
    if as_json:
        _out.print_json(json.dumps(report.to_dict()))
        return report.exit_code
    where = f"vLLM {version}" + (f" on {hardware.name}" if hardware else "")
    _out.print(f"sweetspot lint: {where}")
    marks = {"error": "[red]error  [/red]", "warning": "[yellow]warning[/yellow]",
             "info": "[dim]info   [/dim]"}
    for finding in report.findings:
        flag = f"{finding.flag}: " if finding.flag else ""
        _out.print(f"  {marks[finding.severity]} ", end="")
        _out.print(f"{flag}{finding.message}", markup=False)
    if report.exit_code == 0:
        _out.print("[green]ok[/green]: vLLM would accept this command")
    if report.corrected:
        _out.print("corrected command:")
        _out.print(report.corrected, markup=False)
    elif report.exit_code:
        _out.print("no corrected command: some problems need a decision (see above)")
    return report.exit_code


@app.command()
def advise(
    model: ModelOpt = "qwen2.5-14b",
    gpu: Annotated[str, typer.Option(help="GPU from the catalog.")] = "a100-80gb",
    quant: Annotated[str | None, typer.Option(help="bf16, fp16, fp8, int8, awq, gptq.")] = "awq",
    workload: WorkloadOpt = "chat",
    rate: Annotated[float | None, typer.Option(help="Request rate (req/s) to size for; "
                                                "overrides the workload's.")] = None,
    vllm_version: VersionOpt = str(DEFAULT_VLLM_VERSION),
    yaml_dir: YamlDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the picks as JSON.")] = False,
) -> int:
    """Instant, explained starting points for four goals: max throughput, low latency,
    memory-limited and balanced. The defaults are the field guide's own setup."""
    from sweetspot.tune.advise import advise as make_advice

    version = parse_vllm_version(vllm_version)
    hardware = load_hardware(gpu)
    wl = load_workload(workload)
    if rate is not None:
        if rate <= 0:
            raise SweetspotError(f"--rate must be positive, not {rate:g}")
        wl = dataclasses.replace(wl, arrival=ArrivalSpec(process="poisson", rate=rate))
    q = load_quantization(quant) if quant else None
    advice = make_advice(model, hardware, wl, version, q)
    if yaml_dir is not None:
        try:
            yaml_dir.mkdir(parents=True, exist_ok=True)
            for pick in advice.picks:
                (yaml_dir / f"{pick.goal}.yaml").write_text(pick.yaml)
        except OSError as exc:
            raise SweetspotError(f"cannot write YAML configs to {yaml_dir}: {exc}") from None
    if as_json:
        _out.print_json(json.dumps(_advice_dict(advice)))
        return 0
    s = advice.stats
    _out.print(f"sweetspot advise: {advice.model_ref} ({advice.quant.name}) on "
               f"{hardware.display_name}, vLLM {version}, workload {wl.name!r}")
    _out.print(f"  workload: prompt P50/P99 {s.prompt.p50:.0f}/{s.prompt.p99:.0f} tokens, "
               f"output P50/P99 {s.output.p50:.0f}/{s.output.p99:.0f}, shared prefix on "
               f"{s.prefix_share:.0%} of requests"
               + (f", {s.arrival_rate:g} req/s" if s.arrival_rate else ""))
    table = Table(title="picks", show_lines=False)
    for column in ("goal", "seqs", "util", "tokens/step", "KV tokens", "weights GiB"):
        table.add_column(column)
    for pick in advice.picks:
        c = resolve_defaults(pick.config, version, hardware, advice.max_model_len)
        m = pick.memory
        table.add_row(pick.goal, str(c.max_num_seqs), f"{c.gpu_memory_utilization:g}",
                      str(c.max_num_batched_tokens), f"{m.kv_cache_tokens:,}",
                      f"{m.weight_bytes / GiB:.1f}")
    _out.print(table)
    for pick in advice.picks:
        _out.print(f"\n[bold]{pick.goal}[/bold]")
        _out.print(pick.command, markup=False)
        for reason in pick.reasons:
            _out.print(f"  - {reason}", markup=False)
    _out.print("\n[bold]where the field guide does not hold[/bold]")
    for note in advice.guide_notes:
        _out.print(f"  - {note}", markup=False)
    return 0


def _advice_dict(advice) -> dict:
    return {
        "model": advice.model_ref,
        "gpu": advice.hardware.name,
        "vllm_version": str(advice.version),
        "quantization": advice.quant.name,
        "workload": advice.workload.name,
        "max_model_len": advice.max_model_len,
        "picks": [
            {
                "goal": p.goal,
                "command": p.command,
                "settings": {k: (v.to_dict() if hasattr(v, "to_dict") else v)
                             for k, v in p.config.explicit().items()},
                "kv_cache_tokens": p.memory.kv_cache_tokens,
                "max_concurrency": round(p.memory.max_concurrency, 2),
                "reasons": list(p.reasons),
            }
            for p in advice.picks
        ],
        "guide_notes": list(advice.guide_notes),
    }


workload_app = typer.Typer(help="Inspect workloads: presets, spec files, traces.",
                           no_args_is_help=True)
app.add_typer(workload_app, name="workload")


@workload_app.command("stats")
def workload_stats_command(
    workload: Annotated[str, typer.Argument(help=f"Preset ({', '.join(PRESETS)}), YAML/JSON "
                                                 "spec, ShareGPT JSON or JSONL trace.")],
    num_requests: Annotated[int, typer.Option(min=1, help="Requests to draw for the "
                                                          "statistics.")] = 10_000,
) -> int:
    """P50/P90/P99 of prompt and output lengths, shared-prefix share and arrival rate."""
    wl = load_workload(workload)
    stats = workload_stats(wl, num_requests)
    table = Table(title=f"workload {wl.name!r}: {stats.num_requests:,} requests drawn")
    for column in ("tokens", "mean", "P50", "P90", "P99", "max"):
        table.add_column(column, justify="right")
    for label, length in (("prompt", stats.prompt), ("output", stats.output),
                          ("prompt+output", stats.total)):
        table.add_row(label, f"{length.mean:.0f}", f"{length.p50:.0f}", f"{length.p90:.0f}",
                      f"{length.p99:.0f}", f"{length.max}")
    _out.print(table)
    rate = f"{stats.arrival_rate:g} req/s" if stats.arrival_rate else wl.arrival.process
    _out.print(f"shared prefix: {stats.prefix_share:.0%} of requests, "
               f"{stats.prefix_tokens_share:.0%} of prompt tokens; arrivals: {rate}"
               + ("; priority classes: " + ", ".join(f"{p.name}={p.priority} ({p.share:.0%})"
                                                      for p in wl.priorities)
                  if wl.priorities else ""))
    return 0


@app.command()
def catalog() -> int:
    """List the built-in GPUs and models."""
    _out.print("GPUs:   " + ", ".join(gpu_names()))
    _out.print("models: " + ", ".join(model_names()))
    _out.print("workload presets: " + ", ".join(PRESETS))
    return 0


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn every failure into an exit code."""
    try:
        code = app(args=argv, prog_name="sweetspot", standalone_mode=False)
    except SweetspotError as exc:
        _fail(str(exc), 2)
    except (typer.Abort, KeyboardInterrupt):
        _fail("interrupted", 130)
    except Exception as exc:
        # Typer vendors Click, so its usage errors are matched by shape, not by class.
        if callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code"):
            _fail(exc.format_message(), 2)
        if os.environ.get("SWEETSPOT_DEBUG"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); "
              "rerun with SWEETSPOT_DEBUG=1 for the traceback", 70)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
