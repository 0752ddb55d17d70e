"""`sweetspot calibrate`: fit the simulator's step model to measured runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    ClientPriorityOpt,
    CpuKvOpt,
    QuantOpt,
    _bunched_words,
    _err,
    _out,
    _realtime_client,
    _sim_setup,
    app,
)
from sweetspot.spec.version import DEFAULT_VLLM_VERSION

ResultsArg = Annotated[list[Path] | None, typer.Argument(
    help="Result JSONs of `sweetspot bench --json` against the server.")]
ModelOpt = Annotated[str | None, typer.Option(
    help="Catalog name, HF id or folder with config.json (default: the study's, else "
         "qwen2.5-14b).")]
GpuOpt = Annotated[str | None, typer.Option(help="GPU from the catalog (default: the study's, "
                                                 "else a100-80gb).")]
SettingsOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="knob=value, e.g. max_num_seqs=128 (repeatable); with --study, on top "
                  "of each trial's own configuration.")]
VersionOpt = Annotated[str | None, typer.Option(
    "--vllm-version", help=f"Target vLLM release (default: the study's, else "
                           f"{DEFAULT_VLLM_VERSION}).")]
UrlOpt = Annotated[str | None, typer.Option(help="Benchmark this live server with a short "
                                                 "built-in profile instead.")]
StudyOpt = Annotated[str | None, typer.Option(help="Fit on this study's own real trials "
                                                   "instead, each run with its trial's "
                                                   "configuration.")]
StorageOpt = Annotated[str | None, typer.Option(help="The study's storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")]
ProfileRequestsOpt = Annotated[int, typer.Option(min=8, help="Requests per profile run.")]
ProfileRoundsOpt = Annotated[int, typer.Option(min=1, help="Times the profile runs (--url); "
                                               "more average a host whose speed drifts.")]
WorkloadOpt = Annotated[str | None, typer.Option(help="Lengths for the profile runs (preset "
                                                      "or file); default: a built-in mix.")]
VocabSizeOpt = Annotated[int, typer.Option(help="Prompt token ids are drawn below this "
                                                "(profile).")]
OutOpt = Annotated[Path, typer.Option(help="Calibration file to write.")]


@app.command()
def calibrate(
    results: ResultsArg = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    quant: QuantOpt = None,
    settings: SettingsOpt = None,
    vllm_version: VersionOpt = None,
    cpu_kvcache_space: CpuKvOpt = None,
    url: UrlOpt = None,
    study: StudyOpt = None,
    storage: StorageOpt = None,
    profile_requests: ProfileRequestsOpt = 96,
    profile_rounds: ProfileRoundsOpt = 1,
    workload: WorkloadOpt = None,
    vocab_size: VocabSizeOpt = 32_000,
    out: OutOpt = Path("calibration.json"),
    client_priority: ClientPriorityOpt = "normal",
) -> int:
    """Fit the simulator's step-time model to measured runs of one hardware + model, so
    `sweetspot simulate --calibration FILE` predicts that server."""
    from sweetspot.backends.sim.calibration import Calibration, save_calibration

    if study is not None and (results or url is not None):
        raise SweetspotError("--study fits on the study's own runs: give it without result "
                             "JSONs or --url")
    realtime = _realtime_client(client_priority)
    if study is not None:
        setup, pairs = _study_observations(study, storage, model, gpu, quant, settings,
                                           vllm_version, cpu_kvcache_space)
    else:
        setup = _sim_setup(model or "qwen2.5-14b", gpu or "a100-80gb", quant, settings,
                           vllm_version or str(DEFAULT_VLLM_VERSION), cpu_kvcache_space)
        pairs = _run_observations(results or [], url, profile_requests, vocab_size, workload,
                                  realtime, profile_rounds)
    report = _fit(setup, pairs)
    fitted = tuple({"run": run, "metric": metric, "measured": measured,
                    "predicted": predicted} for run, metric, measured, predicted in report.rows)
    save_calibration(out, Calibration.of(setup.hardware, setup.arch, setup.version,
                                         report.model, fitted, report.covered))
    table = Table(title=f"calibration ({report.iterations} iterations) -> {out}")
    for column in ("run", "metric", "measured", "fitted", "error"):
        table.add_column(column)
    for row in fitted:
        table.add_row(Path(row["run"]).name, row["metric"], f"{row['measured']:.2f}",
                      f"{row['predicted']:.2f}",
                      f"{row['predicted'] / row['measured'] - 1:+.1%}")
    _out.print(table)
    return 0


def _run_observations(results: list[Path], url: str | None, profile_requests: int,
                      vocab_size: int, workload: str | None, realtime: bool, rounds: int):
    """(result, observation) of each result JSON given, then of each profile run against
    --url."""
    from sweetspot.backends.sim.calibration import observation_from_bench

    loaded: list[tuple[str, dict]] = []
    for path in results:
        try:
            loaded.append((str(path), json.loads(path.read_text())))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SweetspotError(f"cannot read {path}: {exc}") from None
    if url is not None:
        loaded += _profile_with_progress(url, profile_requests, vocab_size, workload, realtime,
                                         rounds)
    if not loaded:
        raise SweetspotError("give result JSONs of `sweetspot bench --json`, --url or --study")
    return [(data, observation_from_bench(data, label)) for label, data in loaded]


def _fit(setup, pairs):
    """Fit the step model on the observations: each run simulated with the model in turn, its
    own server configuration (a study's trial's) or the one of --set. A run whose streams
    arrived in bursts keeps its duration at most (the client, not the server, set its
    latencies)."""
    from sweetspot.backends.sim import simulate as run_sim
    from sweetspot.backends.sim.cost import RooflineModel, roofline_constants
    from sweetspot.backends.sim.fit import fit_step_model
    from sweetspot.metrics.run import bunched_streams

    for data, obs in pairs:
        if bunched_streams(data):
            kept = "its duration only" if obs.measured.get("duration") else "none of it"
            _err.print(f"note: {Path(obs.label).name}: its streams arrived in bursts "
                       f"({_bunched_words(data)}; a client or server short of CPU): fitting "
                       f"{kept}", markup=False)

    def simulate_run(obs, step_model):
        run_setup = setup if obs.config is None else dataclasses.replace(setup,
                                                                         config=obs.config)
        run = run_sim(run_setup, obs.requests, max_concurrency=obs.max_concurrency,
                      model=step_model, trace=True)
        if run.status != "ok":
            raise SweetspotError(f"{obs.label}: the simulator cannot start that server "
                                 f"configuration: {run.cause}")
        return run

    observations = [obs for _, obs in pairs if obs.measured]
    start = RooflineModel(setup.hardware, setup.arch, setup.quant,
                          constants=roofline_constants(setup.version))
    return fit_step_model(observations, simulate_run, start)


def _profile_with_progress(url, num_requests, vocab_size, workload, realtime, rounds):
    """``profile_server`` with a progress bar on stderr: which run of how many."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sweetspot.spec.loaders import load_workload
    from sweetspot.tune.calibrate import profile_server

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=_err,
                  transient=True) as progress:
        task = progress.add_task(f"profiling {url}", total=None)

        def on_run(label: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total,
                            description=f"profile run {done + 1} of {total}: {label}")

        runs = profile_server(url, num_requests, vocab_size,
                              workload=load_workload(workload) if workload else None,
                              realtime=realtime, rounds=rounds, on_run=on_run)
        progress.update(task, completed=len(runs))
    _err.print(f"profiled {url}: {len(runs)} runs", markup=False)
    return runs


def _study_observations(name, storage, model, gpu, quant, settings, vllm_version,
                        cpu_kvcache_space):
    """The simulator setup of a study's server (its model, GPU, quantisation and release
    unless given) and one observation per run its trials stored, with the trial's own
    configuration under --set."""
    import shlex

    from sweetspot.engine.lint import lint_command
    from sweetspot.tune.calibrate import study_observations
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import study_data

    storage_url = storage or default_storage_url()
    data = study_data(StudyStore.load(storage_url, name), storage_url).to_dict()
    stored = data.get("settings") or {}
    vllm = stored.get("vllm") or {}
    kv = cpu_kvcache_space
    if kv is None:  # the CPU build's KV space (GiB) that the study's servers had
        try:
            kv = float((vllm.get("env") or {})["VLLM_CPU_KVCACHE_SPACE"]) or None
        except (KeyError, TypeError, ValueError):
            kv = None
    setup = _sim_setup(model or stored.get("model") or "qwen2.5-14b",
                       gpu or stored.get("gpu") or "a100-80gb", quant or stored.get("quant"),
                       None, vllm_version or stored.get("vllm_version")
                       or str(DEFAULT_VLLM_VERSION), kv)
    base = None
    if vllm.get("args"):  # fixed server options every trial ran with, e.g. --enforce-eager
        base = lint_command(shlex.join(vllm["args"]), setup.version, setup.hardware).config

    def skipped(label: str, why: str) -> None:
        _err.print(f"note: {label}: {why}; left out", markup=False)

    # As run_study draws prompt ids: below the model's vocabulary, at most 32,000.
    pairs = study_observations(data, min(setup.arch.vocab_size, 32_000), base,
                               settings or (), on_skip=skipped)
    if not pairs:
        raise SweetspotError(f"study {name!r}: every stored run had failed requests; nothing "
                             "clean to calibrate on")
    _err.print(f"study {name}: {len(pairs)} runs of "
               f"{len({obs.label.split()[1] for _, obs in pairs})} trials", markup=False)
    return setup, pairs
