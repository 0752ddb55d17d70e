"""`sweetspot tune`: a study over the search space, its four picks and report."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

import typer

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    GUIDE_MODEL,
    ApiKeyOpt,
    ClientPriorityOpt,
    DummyWeightsOpt,
    HeaderOpt,
    QuantOpt,
    _err,
    _out,
    _server_line,
    _write_report,
    app,
)
from sweetspot.cli._study_print import all_failed, print_study
from sweetspot.spec.presets import PRESETS
from sweetspot.spec.version import DEFAULT_VLLM_VERSION

if TYPE_CHECKING:  # pydantic loads when the command runs, not when --help does
    from sweetspot.cli._tune_settings import TuneSettings
    from sweetspot.tune.result import TrialResult

ModelOpt = Annotated[str | None, typer.Option(
    help=f"Catalog name, HF id or folder with config.json (default: {GUIDE_MODEL}).")]
GpuOpt = Annotated[str | None, typer.Option(
    help="GPU from the catalog, cpu for the CPU build (default: a100-80gb).")]
WorkloadOpt = Annotated[str | None, typer.Option(
    help=f"Preset ({', '.join(PRESETS)}) or YAML/JSON file (default: chat at --rate "
         "auto).")]
RateOpt = Annotated[str | None, typer.Option(
    help="Offered traffic in req/s, or auto: 65 % of the baseline's steady-state capacity "
         "(default: the workload's own rate; auto for the default workload).")]
AcceptanceOpt = Annotated[float | None, typer.Option(
    min=0.0, max=1.0, help="Speculative acceptance per drafted token the simulator "
                           "assumes (default: per method).")]
VllmVersionOpt = Annotated[str | None, typer.Option(
    "--vllm-version", help=f"Target vLLM release (default {DEFAULT_VLLM_VERSION}; "
                           "--backend vllm: the one --vllm-python has).")]
BackendOpt = Annotated[str, typer.Option(help="sim (predict), vllm (launch real servers), "
                                              "endpoint (the server at --url, as it runs: "
                                              "--strategy rate).")]
UrlOpt = Annotated[str | None, typer.Option(help="A running server (backend endpoint).")]
NumRequestsOpt = Annotated[int | None, typer.Option(
    min=4, help="Requests per run (default 300 simulated, 64 real).")]
SloOpt = Annotated[str | None, typer.Option(
    help="e.g. p99_ttft=300ms,median_tpot=50ms; a bare ttft=300ms (or vLLM's ttft:300) "
         "means P99 (checked at the workload's own rate).")]
SpaceOpt = Annotated[list[str] | None, typer.Option(
    "--space", help="knob=v1,v2,... replaces or adds a dimension; knob= drops it "
                    "(repeatable).")]
SpaceFileOpt = Annotated[Path | None, typer.Option(help="YAML: knob -> [values] (null "
                                                        "drops).")]
FixOpt = Annotated[list[str] | None, typer.Option(
    "--fix", help="knob=value pins a knob for the whole study: the baseline and every "
                  "trial carry it, the search leaves it alone (repeatable).")]
BaselineOpt = Annotated[str | None, typer.Option(
    help='Your current command, "vllm serve MODEL ..." (default: vLLM\'s defaults).')]
StrategyOpt = Annotated[str, typer.Option(help="auto (ofat, then optuna), ofat, grid, "
                                               "optuna, rate (the highest rate at which the "
                                               "baseline meets --slo).")]
ObjectiveOpt = Annotated[str, typer.Option(help="throughput (TPE) or pareto (NSGA-II: "
                                                "throughput vs P99 latency).")]
TrialsOpt = Annotated[int | None, typer.Option(min=1, help="Configurations to run at most "
                                                     "(default 60 simulated, 8 real).")]
TimeBudgetOpt = Annotated[str | None, typer.Option(help="Wall time at most, e.g. 90s, "
                                                        "20m, 2h.")]
ConfirmOpt = Annotated[int | None, typer.Option(
    min=0, help="Extra paired runs of the two finalists (default 7 simulated, 3 real: "
                "each a server start).")]
MemoryOpt = Annotated[float | None, typer.Option(
    min=0.1, help="Memory-limited pick must fit this (GiB per GPU).")]
SeedOpt = Annotated[int, typer.Option()]
CalibrationOpt = Annotated[Path | None, typer.Option(help="Calibration file for the "
                                                         "simulator.")]
StudyNameOpt = Annotated[str | None, typer.Option(help="Name in the storage (default: "
                                                       "model-gpu-workload-time).")]
StorageOpt = Annotated[str | None, typer.Option(help="Optuna storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the named study with "
                                                          "its stored settings.")]
ReportDirOpt = Annotated[Path | None, typer.Option(help="Report folder (default "
                                                        ".sweetspot/reports/STUDY).")]
VllmPythonOpt = Annotated[str | None, typer.Option(
    help="Interpreter with vLLM (backend vllm; default $SWEETSPOT_VLLM_PYTHON, else "
         "this one).")]
LaunchTemplateOpt = Annotated[str | None, typer.Option(help="Launch command for vLLM "
                                                            "elsewhere (backend vllm).")]
TokenizerOpt = Annotated[str | None, typer.Option(
    help="Tokenizer folder: the launched servers' (backend vllm), and the one that counts "
    "recorded text's tokens (ShareGPT, JSONL); without one, 4 characters make a token.")]
ServerEnvOpt = Annotated[list[str] | None, typer.Option(
    "--env", help="KEY=VALUE for launched servers (repeatable).")]
ServerArgsOpt = Annotated[str | None, typer.Option(
    help='Fixed extra server options, e.g. "--enforce-eager" (backend vllm).')]
TrialsDirOpt = Annotated[Path, typer.Option(help="Launched servers' logs.")]
ExecutorOpt = Annotated[str | None, typer.Option(
    help="Where trials run: local (one at a time, here), process (every core: simulated "
         "trials) or ray (a Ray cluster). Default: process for --backend sim, else local.")]
InFlightOpt = Annotated[int | None, typer.Option(
    help="Trials asked for before the first is told (default 1 on local, 8 otherwise): the "
         "same seed and --in-flight give the same study on any executor.")]
RayAddressOpt = Annotated[str | None, typer.Option(
    help="--executor ray: a running cluster (auto, or ray://HOST:PORT); without it Ray "
         "starts on this machine.")]
EmulateGpusOpt = Annotated[int | None, typer.Option(
    help="--executor ray, --backend sim: plan the study on N GPUs: each simulated trial holds "
         "a fake GPU for the time a real trial of it would take (scaled down), and the "
         "makespan is reported beside the ideal.")]
WorkerOpt = Annotated[bool, typer.Option(
    "--worker", help="Serve the study --study-name in --storage beside other workers (any "
                     "machine): start it if it is not there, else join it with its settings; "
                     "the trial budget is the study's, and the last worker makes the picks.")]
EmulateSpeedupOpt = Annotated[float, typer.Option(
    help="--emulate-gpus: seconds of a real trial per second an emulated GPU is held.")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Backend vllm: print the baseline's server command and the first "
                      "sweep's (each knob changed alone), start nothing.")]


@app.command()
def tune(
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    quant: QuantOpt = None,
    workload: WorkloadOpt = None,
    rate: RateOpt = None,
    acceptance: AcceptanceOpt = None,
    vllm_version: VllmVersionOpt = None,
    backend: BackendOpt = "sim",
    url: UrlOpt = None,
    num_requests: NumRequestsOpt = None,
    slo: SloOpt = None,
    space: SpaceOpt = None,
    space_file: SpaceFileOpt = None,
    fix: FixOpt = None,
    baseline: BaselineOpt = None,
    strategy: StrategyOpt = "auto",
    objective: ObjectiveOpt = "throughput",
    trials: TrialsOpt = None,
    time_budget: TimeBudgetOpt = None,
    confirm: ConfirmOpt = None,
    memory_gib: MemoryOpt = None,
    seed: SeedOpt = 0,
    calibration: CalibrationOpt = None,
    study_name: StudyNameOpt = None,
    storage: StorageOpt = None,
    resume: ResumeOpt = False,
    report_dir: ReportDirOpt = None,
    vllm_python: VllmPythonOpt = None,
    launch_template: LaunchTemplateOpt = None,
    tokenizer: TokenizerOpt = None,
    server_env: ServerEnvOpt = None,
    server_args: ServerArgsOpt = None,
    trials_dir: TrialsDirOpt = Path(".sweetspot/trials"),
    client_priority: ClientPriorityOpt = "normal",
    dummy_weights: DummyWeightsOpt = False,
    dry_run: DryRunOpt = False,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
    executor: ExecutorOpt = None,
    in_flight: InFlightOpt = None,
    ray_address: RayAddressOpt = None,
    emulate_gpus: EmulateGpusOpt = None,
    emulate_speedup: EmulateSpeedupOpt = 50.0,
    worker: WorkerOpt = False,
) -> int:
    """Find the best configuration: search the space on the simulator (default) or real vLLM,
    print four picks (max throughput, low latency, memory-limited, balanced) with commands,
    and write a report.

    Exit 0: picks (rate: a rate met the SLOs); 1: none — when every trial failed, the causes
    and, for memory, the tensor-parallel size that fits; 2: unusable input.
    """
    options = SimpleNamespace(**locals())  # every option by name
    from sweetspot.cli._tune_settings import tune_settings

    return _run_tune(tune_settings(options))


def _run_tune(settings: TuneSettings) -> int:
    """Run (or continue) the study with its progress on stderr, print it, write its report."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from sweetspot.tune.study import run_study

    study = settings.study
    if settings.dry_run:
        return _print_tune_commands(study, settings.space_changes)
    started = time.monotonic()
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), console=_err,
                  transient=True) as progress:
        task = progress.add_task(f"study {study.name}", total=study.trials)

        def on_trial(row: TrialResult, best: TrialResult | None) -> None:
            line = f"trial {row.number} {row.status}"
            if best is not None:
                line += f" | best so far: trial {best.number}, {best.throughput:,.0f} tok/s"
            progress.update(task, advance=1, description=line)

        data = run_study(study, settings.storage_url, resume=settings.resume,
                         space_changes=settings.space_changes, on_trial=on_trial,
                         on_phase=lambda text: progress.update(task, description=text),
                         execution=settings.execution, worker=settings.worker)
    if settings.worker and _outcome_elsewhere(settings):
        _out.print(f"worker done: study {study.name} holds {len(data.trials)} trials; its "
                   "picks are made by the last worker (sweetspot report "
                   f"{study.name} --storage URL)", markup=False)
        return 0
    print_study(data, elapsed_s=time.monotonic() - started)
    if data.emulation:
        e, s = data.emulation, data.emulation["search"]
        _out.print(f"planned on {e['gpus']} GPUs: the search's {s['trials']} trials in "
                   f"{s['makespan_s'] / 3600:.2f} h, ideal {s['ideal_s'] / 3600:.2f} h (their GPU "
                   f"time / {e['gpus']}): {s['efficiency']:.0%} busy; the whole study's "
                   f"{e['trials']} in {e['makespan_s'] / 3600:.2f} h, ideal "
                   f"{e['ideal_s'] / 3600:.2f} h", markup=False)
        if e.get("overrun_s", 0) > 0.05 * e["makespan_s"]:
            _out.print(f"the simulations did not keep pace with {e['gpus']} emulated GPUs "
                       f"(holds {e['overrun_s'] / 3600:.2f} h longer): the makespan is too "
                       "long; lower --emulate-speedup", markup=False)
    _write_report(data, settings.report_dir)
    for line in all_failed(data):
        _out.print(line, markup=False)
    if study.strategy == "rate":
        return 0 if (data.rate_search or {}).get("max_rate") else 1
    return 0 if data.picks else 1


def _outcome_elsewhere(settings: TuneSettings) -> bool:
    """A worker left the study's outcome to another (it stored none itself)."""
    from sweetspot.tune.store import StudyStore
    from sweetspot.tune.worker import FINALIZER_ATTR

    attrs = StudyStore.load(settings.storage_url, settings.study.name).user_attrs
    return attrs.get("picks") is None or attrs.get(FINALIZER_ATTR) is None


def _print_tune_commands(settings, changes: dict) -> int:
    """--dry-run: the exact server commands of the baseline and of the first sweep (each knob
    of the space changed alone from the baseline: what ofat and auto run first; grid and
    optuna combine the same values), built by the study's own backend. Nothing starts."""
    from sweetspot.engine.validate import validate_config
    from sweetspot.tune.space import storage_label
    from sweetspot.tune.study import _backend, resolve_study

    if settings.backend != "vllm":
        raise SweetspotError("--dry-run prints the servers that --backend vllm would start; "
                             f"backend {settings.backend} starts none")
    study = resolve_study(settings, changes)
    hardware, space, baseline = study.hardware, study.space, study.baseline
    backend = _backend(settings, study.setup(), settings.model, baseline)

    def show(label: str, config) -> None:
        refused = [p.message for p in validate_config(config, backend.version, hardware)
                   if p.severity == "error"]
        _out.print(f"{label}:", markup=False)
        if refused:
            _out.print(f"  (not started: {refused[0]})", markup=False)
        else:
            _out.print(f"  {_server_line(backend, backend.config_args(config))}", markup=False)

    args = backend.config_args(baseline)
    _out.print(f"sweetspot tune --dry-run: study {settings.name}, vLLM {backend.version}, "
               f"{backend.weights(args)} weights; nothing started (each server's port is "
               "picked at launch)", markup=False)
    show("baseline", baseline)
    if settings.strategy == "rate":
        return 0
    _out.print(f"the first sweep (strategy {settings.strategy}; the space: "
               + "; ".join(f"{d.knob} {', '.join(d.labels)}" for d in space.dimensions) + ")",
               markup=False)
    for dim in space.dimensions:
        current = getattr(baseline, dim.knob)
        for value in dim.values:
            if value != current:
                show(f"{dim.knob}={storage_label(value)}", baseline.replace(**{dim.knob: value}))
    return 0
