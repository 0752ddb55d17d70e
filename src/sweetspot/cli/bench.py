"""`sweetspot bench`: measure one server (launched, or running) as `vllm bench serve` would."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    _BUNCHED,
    ApiKeyOpt,
    ClientPriorityOpt,
    DummyWeightsOpt,
    HeaderOpt,
    WorkloadOpt,
    _bunched_words,
    _err,
    _out,
    _print_result,
    _server_line,
    _write_json,
    app,
)
from sweetspot.spec.hardware import GiB

if TYPE_CHECKING:  # pydantic loads when the command runs, not when --help does
    from sweetspot.cli._bench_settings import BenchSettings

UrlOpt = Annotated[str | None, typer.Option(help="Base URL of a running OpenAI-compatible "
                                                 "server.")]
LaunchOpt = Annotated[bool, typer.Option("--launch", help="Start a vLLM server for this run "
                                         "(one trial): bench options, then -- MODEL and "
                                         "vllm serve options.")]
VllmPythonOpt = Annotated[str | None, typer.Option(
    help="An interpreter that imports vLLM (--launch; default $SWEETSPOT_VLLM_PYTHON, "
         "else this one).")]
LaunchTemplateOpt = Annotated[str | None, typer.Option(
    help="Command that starts vLLM elsewhere, e.g. a container; {args} = the server "
         "options (--launch; needs --vllm-version).")]
VllmVersionOpt = Annotated[str | None, typer.Option(
    "--vllm-version", help="Release behind --launch-template.")]
ServerEnvOpt = Annotated[list[str] | None, typer.Option(
    "--env", help="KEY=VALUE for the server's environment (repeatable), e.g. "
                  "VLLM_CPU_KVCACHE_SPACE=4.")]
KeepServerOpt = Annotated[bool, typer.Option("--keep-server", help="Leave the launched server "
                                             "running afterwards.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="With --launch: print the server "
                                         "command and start nothing.")]
StartupTimeoutOpt = Annotated[float, typer.Option(min=1, help="Seconds the launched server "
                                                         "may take to start.")]
RunTimeoutOpt = Annotated[float | None, typer.Option(min=1, help="Seconds the workload may "
                                                            "run on a launched server.")]
TrialsDirOpt = Annotated[Path, typer.Option(help="Where launched servers' logs go.")]
ModelOpt = Annotated[str | None, typer.Option(help="Served model name (default: the "
                                                   "server's first).")]
NumRequestsOpt = Annotated[int | None, typer.Option(min=1)]
RateOpt = Annotated[str | None, typer.Option(help="Requests per second, or inf.")]
ConcurrencyOpt = Annotated[int | None, typer.Option(min=1, help="Most requests in flight; "
                                                        "alone it means a closed loop.")]
BurstinessOpt = Annotated[float, typer.Option(min=0.01)]
SloOpt = Annotated[str | None, typer.Option(help="e.g. p99_ttft=300ms,median_tpot=50ms; a bare "
                                                "ttft=300ms (or vLLM's ttft:300) means P99 "
                                                "and also counts per request for goodput.")]
PercentilesOpt = Annotated[str, typer.Option(help="Percentiles to report, e.g. 50,99.9.")]
EndpointOpt = Annotated[str, typer.Option(help="completions or chat")]
VocabSizeOpt = Annotated[int | None, typer.Option(
    help="Prompt token ids are drawn below this (default: the launched model's "
         "vocabulary, else 32000).")]
SeedOpt = Annotated[int | None, typer.Option()]
WarmupOpt = Annotated[int, typer.Option(min=0, help="Warm-up requests, not recorded.")]
ProcessesOpt = Annotated[int, typer.Option(min=0, help="Client processes; 0 = by rate.")]
TimeoutOpt = Annotated[float, typer.Option(min=0.1, help="Per-request timeout, s.")]
MetricsIntervalOpt = Annotated[float, typer.Option(min=0, help="Seconds between /metrics "
                                                          "samples in the run; 0: none.")]
CountTokenizerOpt = Annotated[str | None, typer.Option(
    "--tokenizer", help="Count recorded text's tokens (ShareGPT, JSONL without counts) with "
    "this tokenizer (a folder with tokenizer.json); without one, 4 characters make a token.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the result here "
                                                              "(vLLM's keys).")]
DetailedOpt = Annotated[bool, typer.Option(
    "--detailed", help="--json also holds each request's TTFT, ITLs, E2EL, lengths and error "
                       "(vLLM's --save-detailed keys): sweetspot compare pairs two such files "
                       "request by request.")]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    url: UrlOpt = None,
    launch: LaunchOpt = False,
    vllm_python: VllmPythonOpt = None,
    launch_template: LaunchTemplateOpt = None,
    vllm_version: VllmVersionOpt = None,
    server_env: ServerEnvOpt = None,
    keep_server: KeepServerOpt = False,
    dummy_weights: DummyWeightsOpt = False,
    dry_run: DryRunOpt = False,
    startup_timeout: StartupTimeoutOpt = 600.0,
    run_timeout: RunTimeoutOpt = None,
    trials_dir: TrialsDirOpt = Path(".sweetspot/trials"),
    model: ModelOpt = None,
    workload: WorkloadOpt = "chat",
    tokenizer: CountTokenizerOpt = None,
    num_requests: NumRequestsOpt = None,
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = None,
    burstiness: BurstinessOpt = 1.0,
    slo: SloOpt = None,
    percentiles: PercentilesOpt = "50,90,95,99",
    endpoint: EndpointOpt = "completions",
    vocab_size: VocabSizeOpt = None,
    seed: SeedOpt = None,
    warmup: WarmupOpt = 1,
    processes: ProcessesOpt = 0,
    timeout: TimeoutOpt = 600.0,
    metrics_interval: MetricsIntervalOpt = 1.0,
    json_path: JsonOpt = None,
    detailed: DetailedOpt = False,
    client_priority: ClientPriorityOpt = "normal",
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
) -> int:
    """Measure a running server with a workload, the way `vllm bench serve` measures; or,
    with --launch, start vLLM for the run (one trial) and report what the server said too."""
    options = SimpleNamespace(**locals())  # every option by name, and ctx
    from sweetspot.cli._bench_settings import bench_settings

    return _run_bench(bench_settings(options))


def _run_bench(settings: BenchSettings) -> int:
    """Send the workload to the launched or running server, measure it, write --json, print."""
    from sweetspot.spec.requests import sample_requests

    launch = settings.launch
    backend = _vllm_backend(settings) if launch is not None else None
    if launch is not None and launch.dry_run:
        _out.print(f"server command ({backend.weights(launch.serve_args)} weights; --dry-run: "
                   "not started, the port is picked at launch):", markup=False)
        _out.print(_server_line(backend, launch.serve_args), markup=False)
        return 0
    load, model, vocab_size = _client(settings, backend)
    requests = sample_requests(settings.workload, settings.num_requests, seed=settings.seed,
                               vocab_size=vocab_size)
    trial, run = _run_requests(settings, backend, requests, load, model)
    measurement, data = _measured(settings, run)
    if trial is not None:
        data["trial"] = trial.to_dict()
    url = trial.base_url if trial is not None else settings.url
    data["sweetspot"] = _described(settings, url, model, requests, run, vocab_size)
    if settings.detailed and run is not None:
        from sweetspot.guard.requests import detailed_arrays

        data.update(detailed_arrays(run.records))
    if settings.json_path is not None:
        _write_json(settings.json_path, data)
    return _print_bench(measurement, data, trial, run)


def _vllm_backend(settings: BenchSettings):
    from sweetspot.backends.vllm import VllmBackend

    launch = settings.launch
    return VllmBackend(
        launch.model_dir, trials_dir=launch.trials_dir, python=launch.server.python,
        template=launch.server.template, vllm_version=launch.vllm_version,
        env=launch.server.env, startup_timeout_s=launch.startup_timeout_s,
        run_timeout_s=launch.run_timeout_s, warmup_requests=settings.load.warmup_requests,
        dummy_weights=launch.dummy_weights)


def _client(settings: BenchSettings, backend):
    """The client's settings, the model named and the vocabulary prompts are drawn from: a
    launched server's model folder, or what the running one serves (asked before the run)."""
    import asyncio
    import dataclasses

    from sweetspot.backends.loadgen import check_server

    if backend is not None:
        vocab_size = settings.vocab_size or _model_vocab(Path(backend.model_dir)) or 32_000
        return settings.load, backend.model_dir, vocab_size
    served = asyncio.run(check_server(settings.url, headers=settings.load.headers))
    model = settings.load.model or (served[0] if served else None)
    if not model:
        raise SweetspotError(f"{settings.url} serves no model; pass --model")
    return dataclasses.replace(settings.load, model=model), model, settings.vocab_size or 32_000


def _run_requests(settings: BenchSettings, backend, requests, load, model):
    """The requests run, on the server launched for them (one trial) or on the one at --url,
    with a progress bar on stderr: (the trial or None, the run)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sweetspot.backends.endpoint import run_endpoint

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=_err,
                  transient=True) as progress:
        if backend is None:
            task = progress.add_task(f"{model} @ {settings.url}", total=len(requests))
            return None, run_endpoint(requests, load, on_done=lambda: progress.advance(task),
                                      scrape_interval_s=settings.metrics_interval_s)
        task = progress.add_task("starting vLLM", total=len(requests))

        def ready(handle) -> None:
            _err.print(f"server ready at {handle.base_url} (process group {handle.pid}, "
                       f"started in {handle.startup_s:.1f} s)", markup=False)
            progress.update(task, description=f"{Path(model).name} @ {handle.base_url}")

        trial = backend.run_args(settings.launch.serve_args, requests, load,
                                 keep_server=settings.launch.keep_server, on_ready=ready,
                                 on_done=lambda: progress.advance(task),
                                 scrape_interval_s=settings.metrics_interval_s)
    return trial, trial.run


def _measured(settings: BenchSettings, run) -> tuple:
    """The run's measurement (None when no run) and its result dict, with the SLO checks."""
    from sweetspot.metrics.run import measure
    from sweetspot.metrics.slo import check_slos

    if run is None:
        return None, {}
    measurement = measure(run, percentiles=settings.percentiles,
                          slos=settings.slos.goodput_ms or None)
    data = measurement.to_dict()
    checks = check_slos(settings.slos, data)
    if checks:
        data["slos"] = {c.slo.key: {"limit_ms": c.slo.limit_ms, "measured_ms": c.measured_ms,
                                    "met": c.met, "per_request": c.slo.per_request}
                        for c in checks}
    return measurement, data


def _described(settings: BenchSettings, url, model, requests, run, vocab_size) -> dict:
    """What ran, beside vLLM's keys: what `sweetspot calibrate` needs to draw the same
    requests again."""
    from sweetspot.spec.workload import workload_to_dict

    wl = settings.workload
    return {"url": url, "model": model, "workload": wl.name, "num_requests": len(requests),
            "arrival": wl.arrival.process, "rate": wl.arrival.rate,
            "max_concurrency": settings.load.max_concurrency,
            "client_processes": run.processes if run is not None else None,
            "workload_spec": workload_to_dict(wl),
            "seed": wl.seed if settings.seed is None else settings.seed,
            "vocab_size": vocab_size}


def _print_bench(measurement, data: dict, trial, run) -> int:
    """The result, the SLO verdicts and the launched server's facts; the exit code: 0 when
    requests completed (and a launched server's trial is ok), else 1."""
    from sweetspot.backends.base import every_request_failed

    if measurement is not None:
        _print_result(measurement)
        _print_slo_checks(data.get("slos") or {})
        _warn_bunched(data)
        if trial is None and (failed := every_request_failed(run)):
            _err.print(f"bench: {failed[0]}: {failed[1]}", markup=False)
    if trial is not None:
        _print_trial(trial)
        if not trial.ok:
            return 1
    return 0 if measurement is not None and measurement.result.completed else 1


def _warn_bunched(data: dict) -> None:
    from sweetspot.metrics.run import bunched_streams

    if bunched_streams(data):
        _err.print(f"warning: the streams arrived in bursts: {_bunched_words(data)}: {_BUNCHED}",
                   markup=False)


def _print_slo_checks(checks: dict) -> None:
    for key, c in checks.items():
        measured = "not measured" if c["measured_ms"] is None else f"{c['measured_ms']:.2f} ms"
        verdict = "met" if c["met"] else "MISSED"
        goodput = ", and per request for goodput" if c["per_request"] else ""
        _out.print(f"SLO {key.removesuffix('_ms')} <= {c['limit_ms']:g} ms{goodput}: "
                   f"{verdict} ({measured})", markup=False)


def _model_vocab(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _print_trial(trial) -> None:
    table = Table(title="Launched server", show_header=False)
    table.add_column("fact")
    table.add_column("value", justify="right")
    t, facts, memory = trial.timings, trial.server, trial.server.memory

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    rows = [("Trial status", trial.status), ("vLLM", trial.vllm_version or "-"),
            ("Weights", {"dummy": "dummy (random: --dummy-weights)"}.get(trial.weights or "",
                                                                       trial.weights or "-")),
            ("Check / start-up / warm-up / workload / teardown (s)",
             " / ".join(seconds(v) for v in (t.check_s, t.startup_s, t.warmup_s,
                                              t.workload_s, t.teardown_s))),
            ("Trial overhead (s)", f"{t.overhead_s:.1f}")]
    if facts is not None and facts.kv_cache_tokens is not None:
        rows.append((f"{facts.device or 'GPU'} KV cache (tokens)", f"{facts.kv_cache_tokens:,}"))
    if facts is not None and facts.max_concurrency is not None:
        rows.append((f"Max concurrency at {facts.max_model_len:,} tokens",
                     f"{facts.max_concurrency:.2f}x"))
    if facts is not None and facts.kv_cache_bytes is not None:
        rows.append(("KV cache memory (GiB)", f"{facts.kv_cache_bytes / GiB:.2f}"))
    if facts is not None and facts.model_load_bytes is not None:
        rows.append(("Model weights loaded (GiB)", f"{facts.model_load_bytes / GiB:.2f}"))
    if facts is not None and facts.model_load_s is not None:
        rows.append(("Model load / engine init (s)",
                     f"{facts.model_load_s:.1f} / {seconds(facts.engine_init_s)}"))
    if memory is not None and memory.host_rss_bytes is not None:
        rows.append(("Peak host RSS of the server (GiB)", f"{memory.host_rss_bytes / GiB:.2f}"))
    if memory is not None and memory.device_bytes is not None:
        rows.append(("Peak device memory of the server (GiB)",
                     f"{memory.device_bytes / GiB:.2f}"))
    for label, value in rows:
        table.add_row(label, value)
    _out.print(table)
    if trial.cause:
        _out.print(f"trial: {trial.status} — {trial.cause}", markup=False)
        for line in trial.log_lines:
            _out.print(f"  | {line}", markup=False)
    if trial.log_path is not None:
        _out.print(f"server log: {trial.log_path}", markup=False)
    if trial.kept:
        _out.print(f"server left running at {trial.base_url}; stop it with "
                   f"kill -TERM -- -{trial.server_pid}", markup=False)
