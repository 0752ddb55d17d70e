"""`sweetspot compare`: is B better than A, and is the difference real?"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

import typer

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    ApiKeyOpt,
    ClientPriorityOpt,
    DummyWeightsOpt,
    HeaderOpt,
    QuantOpt,
    _err,
    _out,
    app,
)
from sweetspot.cli.tune import (
    AcceptanceOpt,
    CalibrationOpt,
    GpuOpt,
    LaunchTemplateOpt,
    RateOpt,
    SeedOpt,
    ServerArgsOpt,
    ServerEnvOpt,
    SloOpt,
    TokenizerOpt,
    TrialsDirOpt,
    VllmPythonOpt,
    VllmVersionOpt,
    WorkloadOpt,
)

if TYPE_CHECKING:
    from sweetspot.guard.compare import Comparison

ModelOpt = Annotated[str | None, typer.Option(
    help="Catalog name, HF id or folder with config.json (default: the model A and B serve).")]
InputOpt = Annotated[str | None, typer.Argument(
    help='A "vllm serve ..." command, or a result file (bench --json, vllm bench serve '
         "--save-result).", show_default=False)]
UrlAOpt = Annotated[str | None, typer.Option("--url-a", help="A running server: A (with "
                                                              "--url-b, instead of A and B).")]
UrlBOpt = Annotated[str | None, typer.Option("--url-b", help="A running server: B.")]
BackendOpt = Annotated[str, typer.Option(help="Where A and B commands run: sim (predict) or "
                                              "vllm (launch real servers).")]
NumRequestsOpt = Annotated[int | None, typer.Option(
    min=4, help="Requests per run (default 300 simulated, 64 real and endpoints).")]
ToleranceOpt = Annotated[str | None, typer.Option(
    help="How much worse B may be before it is a regression, e.g. tpot=5%,throughput=3%,"
         "errors=2 (a bare latency means its P99); names a guarded metric.")]
MinRepeatsOpt = Annotated[int, typer.Option(min=1, help="Pairs run before the first look.")]
MaxRepeatsOpt = Annotated[int, typer.Option(min=1, help="Pairs run at most; stops earlier "
                                                        "once every guarded metric is "
                                                        "decided.")]
SpreadOpt = Annotated[float | None, typer.Option(
    min=0.0, max=1.0, help="Simulator: each server's speed is drawn with this spread "
                           "(log-sd of its step times), as fresh real servers differ; 0 "
                           "turns it off (default 0.015).")]
VocabSizeOpt = Annotated[int | None, typer.Option(
    min=2, help="--url-a/--url-b: prompt token ids are drawn below this (default 32000; "
                "commands: the model's vocabulary).")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the comparison here.")]
MarkdownOpt = Annotated[Path | None, typer.Option(
    "--markdown", help="Write a summary for a pull-request comment here.")]
FailOpt = Annotated[bool, typer.Option(
    "--fail-on-regression", help="Exit 1 when B is significantly worse on a guarded metric "
                                 "(or fails): a rollout gate.")]


@app.command()
def compare(
    a: InputOpt = None,
    b: InputOpt = None,
    url_a: UrlAOpt = None,
    url_b: UrlBOpt = None,
    backend: BackendOpt = "sim",
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    quant: QuantOpt = None,
    workload: WorkloadOpt = None,
    rate: RateOpt = None,
    acceptance: AcceptanceOpt = None,
    vllm_version: VllmVersionOpt = None,
    num_requests: NumRequestsOpt = None,
    slo: SloOpt = None,
    tolerance: ToleranceOpt = None,
    min_repeats: MinRepeatsOpt = 3,
    max_repeats: MaxRepeatsOpt = 5,
    speed_spread: SpreadOpt = None,
    seed: SeedOpt = 0,
    vocab_size: VocabSizeOpt = None,
    calibration: CalibrationOpt = None,
    vllm_python: VllmPythonOpt = None,
    launch_template: LaunchTemplateOpt = None,
    tokenizer: TokenizerOpt = None,
    server_env: ServerEnvOpt = None,
    server_args: ServerArgsOpt = None,
    trials_dir: TrialsDirOpt = Path(".sweetspot/trials"),
    client_priority: ClientPriorityOpt = "normal",
    dummy_weights: DummyWeightsOpt = False,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
    json_path: JsonOpt = None,
    markdown_path: MarkdownOpt = None,
    fail_on_regression: FailOpt = False,
) -> int:
    """Is B better than A, and is the difference real? A and B are two "vllm serve ..."
    commands run in interleaved pairs on --backend (fresh servers, the same requests), two
    running servers (--url-a, --url-b), or two saved results. Prints each metric's change
    with its interval (α 5 % spent over the looks, shared by the guarded metrics) and a
    verdict: better, worse, within tolerance, or no significant difference.

    Exit 0: compared; 1: --fail-on-regression and B is worse on a guarded metric or failed;
    2: unusable input.
    """
    options = SimpleNamespace(**locals())  # every option by name
    from sweetspot.cli._compare_settings import input_mode, plan_of

    mode = input_mode(options)
    plan = plan_of(options)
    if mode == "files":
        from sweetspot.guard.files import compare_files

        comparison = compare_files(Path(a or ""), Path(b or ""), plan)
    else:
        comparison = _run_pairs(options, mode, plan)
    _print(comparison)
    _write(comparison, json_path, markdown_path)
    return 1 if fail_on_regression and comparison.verdict == "worse" else 0


def _run_pairs(options: SimpleNamespace, mode: str, plan) -> Comparison:
    """A and B built from the options, then run pair by pair with progress on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress

    from sweetspot.cli._compare_settings import command_sides, endpoint_sides
    from sweetspot.guard.compare import run_compare

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), console=_err, transient=True) as progress:
        task = progress.add_task("starting A and B", total=plan.max_repeats)
        a, b, notes = (endpoint_sides if mode == "endpoint" else command_sides)(options)
        progress.update(task, description="pair 1: A, then B")

        def on_pair(n: int, pair) -> None:
            progress.update(task, advance=1, description=f"pair {n + 1}: A, then B "
                            f"(pair {n}: A {pair[0].status}, B {pair[1].status})")

        return run_compare(a, b, plan, source=options.backend if mode == "commands"
                           else mode, notes=[n for n in notes if n], on_pair=on_pair)


def _print(comparison: Comparison) -> None:
    from rich.table import Table

    from sweetspot.guard.summary import COLUMNS, headline, rows

    table = Table(title=f"B against A ({len(comparison.runs)} pair(s), * = guarded)")
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="right" if 0 < i < 5 else "left")
    styles = {"better": "green", "worse": "red"}
    for row in rows(comparison):
        style = styles.get(row[-1].split(" (")[0]) if row[0].endswith("*") else None
        table.add_row(*row, style=style)
    _out.print(f"A: {comparison.a_label}", markup=False)
    _out.print(f"B: {comparison.b_label}", markup=False)
    _out.print(table)
    for note in comparison.notes:
        _out.print(f"note: {note}", markup=False)
    if comparison.failure:
        _out.print(comparison.failure, markup=False)
    _out.print(f"verdict: {headline(comparison)}", markup=False)


def _write(comparison: Comparison, json_path: Path | None, markdown_path: Path | None) -> None:
    from sweetspot.cli._common import _write_json
    from sweetspot.guard.summary import markdown

    if json_path is not None:
        _write_json(json_path, comparison.to_dict())
    if markdown_path is not None:
        from sweetspot._files import write_text

        try:
            write_text(markdown_path, markdown(comparison))
        except OSError as exc:
            raise SweetspotError(f"cannot write {markdown_path}: {exc}") from None
