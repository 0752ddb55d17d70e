"""`sweetspot lint`: check a `vllm serve` command against a vLLM release and a GPU."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sweetspot.cli._common import VersionOpt, _out, app
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version


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
