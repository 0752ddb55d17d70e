"""The ``sweetspot`` command: a thin Typer layer over the packages.

Every command turns its options into specs at this edge, calls one function, and renders the
result. Bad input raises ``SweetspotError`` (or a Click usage error) and ends here as one line on
stderr with exit code 2.

Exit codes: 0 an answer; 1 a finding that is "no" (lint found problems; a trial failed; a model
does not fit, with the tensor-parallel size that does; a study with no pick); 2 unusable input or
a missing dependency (named, with its pip install); 70 a bug; 130 / 143 interrupted / terminated.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.engine.releases import resolve_defaults
from sweetspot.spec.hardware import GiB, gpu_names, load_hardware
from sweetspot.spec.model import model_names
from sweetspot.spec.presets import PRESETS
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version

app = typer.Typer(
    name="sweetspot",
    help="Find the best launch configuration of a vLLM deployment for a GPU, model and traffic.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True)

VersionOpt = Annotated[
    str, typer.Option("--vllm-version", help=f"Target vLLM release (default "
                                             f"{DEFAULT_VLLM_VERSION}).")
]
ModelOpt = Annotated[str, typer.Option(help="Catalog name, HF id or folder with config.json.")]
WorkloadOpt = Annotated[str, typer.Option(help=f"Preset ({', '.join(PRESETS)}) or YAML/JSON "
                                               "file.")]
QuantOpt = Annotated[str | None, typer.Option(help="bf16, fp16, fp8, int8, awq, gptq "
                                                   "(default: what the checkpoint is).")]
# The field guide's setup, the default of advise and tune: Qwen2.5-14B's AWQ checkpoint.
GUIDE_MODEL = "Qwen/Qwen2.5-14B-Instruct-AWQ"
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
    model: ModelOpt = GUIDE_MODEL,
    gpu: Annotated[str, typer.Option(help="GPU from the catalog.")] = "a100-80gb",
    quant: QuantOpt = None,
    workload: WorkloadOpt = "chat",
    rate: Annotated[float | None, typer.Option(help="Request rate (req/s) to size for; "
                                                "overrides the workload's.")] = None,
    tensor_parallel_size: Annotated[int, typer.Option(
        min=1, max=64, help="GPUs one server splits the model across.")] = 1,
    vllm_version: VersionOpt = str(DEFAULT_VLLM_VERSION),
    yaml_dir: YamlDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the picks as JSON.")] = False,
) -> int:
    """Instant, explained starting points for four goals: max throughput, low latency,
    memory-limited and balanced. The defaults are the field guide's own setup.

    Exit 0: picks printed; 1: the model does not fit (the finding names the tensor-parallel
    size that fits); 2: unusable input.
    """
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.workload import ArrivalSpec
    from sweetspot.tune.advise import advise as make_advice

    version = parse_vllm_version(vllm_version)
    hardware = load_hardware(gpu)
    wl = load_workload(workload)
    if rate is not None:
        if not math.isfinite(rate) or rate <= 0:
            raise SweetspotError(f"--rate must be a positive number of requests/s, not {rate:g}")
        wl = dataclasses.replace(wl, arrival=ArrivalSpec(process="poisson", rate=rate))
    q = load_quantization(quant) if quant else None
    advice = make_advice(model, hardware, wl, version, q, tensor_parallel_size)
    if advice.unfit is not None:
        return _print_unfit(advice, as_json)
    if yaml_dir is not None:
        try:
            yaml_dir.mkdir(parents=True, exist_ok=True)
            for pick in advice.picks:
                write_text(yaml_dir / f"{pick.goal}.yaml", pick.yaml)
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


def _print_unfit(advice, as_json: bool) -> int:
    """A model that does not fit: the finding instead of commands that cannot start."""
    unfit = advice.unfit
    hint = (f" (rerun with --tensor-parallel-size {unfit.tensor_parallel_size})"
            if unfit.tensor_parallel_size else "")
    if as_json:
        _out.print_json(json.dumps({**_advice_dict(advice), "fits": False,
                                    "finding": unfit.message,
                                    "tensor_parallel_size": unfit.tensor_parallel_size}))
        return 1
    _out.print(f"sweetspot advise: {advice.model_ref} ({advice.quant.name}) on "
               f"{advice.hardware.display_name}, vLLM {advice.version}", markup=False)
    _out.print(f"{unfit.message}{hint}", markup=False)
    return 1


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


def _parse_floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise SweetspotError(f"bad {what} {text!r}: expected numbers separated by commas"
                             ) from None


DummyWeightsOpt = Annotated[bool, typer.Option(
    "--dummy-weights", help="Random weights (vLLM's --load-format dummy): the model folder "
                            "needs only config.json and a tokenizer. For tests and speed checks; "
                            "the model's own weights load by default, and speculative "
                            "decoding's acceptance means nothing without them.")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    "--api-key", envvar=["OPENAI_API_KEY", "VLLM_API_KEY"], show_envvar=False,
    help="Key of a server started with --api-key, sent as 'Authorization: Bearer KEY' "
         "(default $OPENAI_API_KEY, else $VLLM_API_KEY; a server sweetspot launches is sent "
         "the key it was started with). Never written to any file.")]
HeaderOpt = Annotated[list[str] | None, typer.Option(
    "--header", help="'Name: value' sent with every request (repeatable).")]


ClientPriorityOpt = Annotated[str, typer.Option(
    "--client-priority", help="normal, or realtime: the load generator runs SCHED_FIFO (root or "
                              "CAP_SYS_NICE), so a CPU-build server on the same cores cannot "
                              "starve it into reading whole answers at once.")]


def _realtime_client(priority: str) -> bool:
    """Parse --client-priority; check a real-time client is allowed before anything starts."""
    from sweetspot.backends.loadgen import client_priority

    if priority not in ("normal", "realtime"):
        raise SweetspotError(f"--client-priority must be normal or realtime, not {priority!r}")
    if priority == "realtime":
        with client_priority(True):
            pass
    return priority == "realtime"


_BUNCHED = ("the client (or the API server) was short of CPU, so TTFT, TPOT and ITL measure the "
            "machine's scheduler, not the server; run the client on other cores, or with "
            "--client-priority realtime")


def _bunched_words(data: dict) -> str:
    from sweetspot.metrics.run import BURST_GAP_S

    return (f"{data['bunched_itl_share']:.0%} of the gaps between a stream's chunks were under "
            f"{BURST_GAP_S * 1e3:g} ms (chunks that waited, then were read at once)")


def _warn_bunched(data: dict) -> None:
    from sweetspot.metrics.run import bunched_streams

    if bunched_streams(data):
        _err.print(f"warning: the streams arrived in bursts: {_bunched_words(data)}: {_BUNCHED}",
                   markup=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="Base URL of a running OpenAI-compatible "
                                                 "server.")] = None,
    launch: Annotated[bool, typer.Option("--launch", help="Start a vLLM server for this run "
                                         "(one trial): bench options, then -- MODEL and "
                                         "vllm serve options.")] = False,
    vllm_python: Annotated[str | None, typer.Option(
        help="An interpreter that imports vLLM (--launch; default $SWEETSPOT_VLLM_PYTHON, "
             "else this one).")] = None,
    launch_template: Annotated[str | None, typer.Option(
        help="Command that starts vLLM elsewhere, e.g. a container; {args} = the server "
             "options (--launch; needs --vllm-version).")] = None,
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help="Release behind --launch-template.")] = None,
    server_env: Annotated[list[str] | None, typer.Option(
        "--env", help="KEY=VALUE for the server's environment (repeatable), e.g. "
                      "VLLM_CPU_KVCACHE_SPACE=4.")] = None,
    keep_server: Annotated[bool, typer.Option("--keep-server", help="Leave the launched server "
                                              "running afterwards.")] = False,
    dummy_weights: DummyWeightsOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="With --launch: print the server "
                                          "command and start nothing.")] = False,
    startup_timeout: Annotated[float, typer.Option(min=1, help="Seconds the launched server "
                                                          "may take to start.")] = 600.0,
    run_timeout: Annotated[float | None, typer.Option(min=1, help="Seconds the workload may "
                                                             "run on a launched server.")] = None,
    trials_dir: Annotated[Path, typer.Option(help="Where launched servers' logs go.")] = Path(
        ".sweetspot/trials"),
    model: Annotated[str | None, typer.Option(help="Served model name (default: the "
                                                   "server's first).")] = None,
    workload: WorkloadOpt = "chat",
    num_requests: Annotated[int | None, typer.Option(min=1)] = None,
    rate: Annotated[str | None, typer.Option(help="Requests per second, or inf.")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Most requests in flight; "
                                                         "alone it means a closed loop.")] = None,
    burstiness: Annotated[float, typer.Option(min=0.01)] = 1.0,
    slo: Annotated[str | None, typer.Option(help="e.g. p99_ttft=300ms,median_tpot=50ms; a bare "
                                                 "ttft=300ms (or vLLM's ttft:300) means P99 "
                                                 "and also counts per request for goodput.")
                   ] = None,
    percentiles: Annotated[str, typer.Option(help="Percentiles to report, e.g. 50,99.9.")
                           ] = "50,90,95,99",
    endpoint: Annotated[str, typer.Option(help="completions or chat")] = "completions",
    vocab_size: Annotated[int | None, typer.Option(
        help="Prompt token ids are drawn below this (default: the launched model's "
             "vocabulary, else 32000).")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Warm-up requests, not recorded.")] = 1,
    processes: Annotated[int, typer.Option(min=0, help="Client processes; 0 = by rate.")] = 0,
    timeout: Annotated[float, typer.Option(min=0.1, help="Per-request timeout, s.")] = 600.0,
    metrics_interval: Annotated[float, typer.Option(min=0, help="Seconds between /metrics "
                                                           "samples in the run; 0: none.")] = 1.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the result here "
                                                                   "(vLLM's keys).")] = None,
    client_priority: ClientPriorityOpt = "normal",
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
) -> int:
    """Measure a running server with a workload, the way `vllm bench serve` measures; or,
    with --launch, start vLLM for the run (one trial) and report what the server said too."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sweetspot.backends.endpoint import run_endpoint
    from sweetspot.backends.loadgen import LoadConfig, check_server, request_headers
    from sweetspot.backends.trial import every_request_failed
    from sweetspot.metrics.run import measure
    from sweetspot.metrics.slo import check_slos, parse_slos
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.requests import sample_requests
    from sweetspot.spec.workload import workload_to_dict

    if endpoint not in ("completions", "chat"):
        raise SweetspotError(f"--endpoint must be completions or chat, not {endpoint!r}")
    if launch == (url is not None):
        raise SweetspotError("give either --url (a running server) or --launch (start one)")
    if ctx.args and not launch:
        raise SweetspotError(f"unexpected arguments: {' '.join(ctx.args)} (server options "
                             "go after --launch ... --)")
    if (dummy_weights or dry_run) and not launch:
        raise SweetspotError(f"{'--dummy-weights' if dummy_weights else '--dry-run'} goes "
                             "with --launch (a server that sweetspot starts)")
    slos = parse_slos(slo)  # checked before anything starts: a typo costs milliseconds
    pcts = _percentiles(percentiles, slos.percentiles)
    wl = _override_arrivals(load_workload(workload), rate, concurrency, burstiness)
    config = LoadConfig(base_url=url or "", model=model or "", endpoint=endpoint,
                        max_concurrency=concurrency, timeout_s=timeout,
                        warmup_requests=warmup, processes=processes,
                        realtime=_realtime_client(client_priority),
                        headers=request_headers(api_key, header or []))
    trial = None
    if launch:
        backend, serve_args = _launch_backend(ctx.args, vllm_python, launch_template,
                                              vllm_version, server_env, startup_timeout,
                                              run_timeout, trials_dir, warmup, dummy_weights)
        if dry_run:
            _out.print(f"server command ({backend.weights(serve_args)} weights; --dry-run: "
                       "not started, the port is picked at launch):", markup=False)
            _out.print(_server_line(backend, serve_args), markup=False)
            return 0
        model = backend.model_dir
        vocab_size = vocab_size or _model_vocab(Path(backend.model_dir)) or 32_000
        requests = sample_requests(wl, num_requests, seed=seed, vocab_size=vocab_size)
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=_err,
                      transient=True) as progress:
            task = progress.add_task("starting vLLM", total=len(requests))

            def ready(handle) -> None:
                _err.print(f"server ready at {handle.base_url} (process group {handle.pid}, "
                           f"started in {handle.startup_s:.1f} s)", markup=False)
                progress.update(task, description=f"{Path(model).name} @ {handle.base_url}")

            trial = backend.run_args(serve_args, requests, config, keep_server=keep_server,
                                     on_ready=ready, on_done=lambda: progress.advance(task),
                                     scrape_interval_s=metrics_interval)
        url = trial.base_url
        run = trial.run
    else:
        vocab_size = vocab_size or 32_000
        served = asyncio.run(check_server(url, headers=config.headers))
        model = model or (served[0] if served else None)
        if not model:
            raise SweetspotError(f"{url} serves no model; pass --model")
        config = dataclasses.replace(config, model=model)
        requests = sample_requests(wl, num_requests, seed=seed, vocab_size=vocab_size)
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=_err,
                      transient=True) as progress:
            task = progress.add_task(f"{model} @ {url}", total=len(requests))
            run = run_endpoint(requests, config, on_done=lambda: progress.advance(task),
                               scrape_interval_s=metrics_interval)
    data: dict = {}
    measurement = None
    if run is not None:
        measurement = measure(run, percentiles=pcts, slos=slos.goodput_ms or None)
        data = measurement.to_dict()
        checks = check_slos(slos, data)
        if checks:
            data["slos"] = {c.slo.key: {"limit_ms": c.slo.limit_ms, "measured_ms": c.measured_ms,
                                        "met": c.met, "per_request": c.slo.per_request}
                            for c in checks}
    if trial is not None:
        data["trial"] = trial.to_dict()
    data["sweetspot"] = {"url": url, "model": model, "workload": wl.name,
                         "num_requests": len(requests), "arrival": wl.arrival.process,
                         "rate": wl.arrival.rate, "max_concurrency": concurrency,
                         "client_processes": run.processes if run is not None else None,
                         # what `sweetspot calibrate` needs to draw the same requests again
                         "workload_spec": workload_to_dict(wl),
                         "seed": wl.seed if seed is None else seed, "vocab_size": vocab_size}
    if json_path is not None:
        try:
            write_text(json_path, json.dumps(data, indent=2))
        except OSError as exc:
            raise SweetspotError(f"cannot write {json_path}: {exc}") from None
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


def _percentiles(text: str, needed: tuple[float, ...] = ()) -> tuple[float, ...]:
    """--percentiles, checked before the run, then any an SLO needs measured."""
    pcts = _parse_floats(text, "percentiles")
    if bad := [p for p in pcts if not 0 <= p <= 100]:
        raise SweetspotError(f"bad percentiles {text!r}: each must be from 0 to 100, not "
                             f"{bad[0]:g}")
    return tuple(sorted(dict.fromkeys((*pcts, *needed))))


def _print_slo_checks(checks: dict) -> None:
    for key, c in checks.items():
        measured = "not measured" if c["measured_ms"] is None else f"{c['measured_ms']:.2f} ms"
        verdict = "met" if c["met"] else "MISSED"
        goodput = ", and per request for goodput" if c["per_request"] else ""
        _out.print(f"SLO {key.removesuffix('_ms')} <= {c['limit_ms']:g} ms{goodput}: "
                   f"{verdict} ({measured})", markup=False)


def _env_items(items: list[str] | None) -> dict[str, str]:
    """--env KEY=VALUE, or KEY alone for this process's own value (a token kept out of the
    shell's history: it is used, never written)."""
    env: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not key or any(c in key for c in " \t\n"):
            raise SweetspotError(f"bad --env {key!r}: expected KEY=VALUE or KEY")
        if not sep:
            if key not in os.environ:
                raise SweetspotError(f"--env {key}: not set in this environment (or pass "
                                     f"{key}=VALUE)")
            value = os.environ[key]
        env[key] = value
    return env


def _launch_backend(extra: list[str], vllm_python: str | None, template: str | None,
                    version: str | None, env_items: list[str] | None, startup_timeout: float,
                    run_timeout: float | None, trials_dir: Path, warmup: int,
                    dummy_weights: bool = False):
    from sweetspot.backends.vllm import VllmBackend, split_serve_command

    model_dir, serve_args = split_serve_command(extra)
    if model_dir is None:
        raise SweetspotError("--launch needs the model: sweetspot bench --launch [options] -- "
                             "MODEL [vllm serve options]")
    env = _env_items(env_items)
    python = vllm_python or os.environ.get("SWEETSPOT_VLLM_PYTHON") or sys.executable
    if template is None and not (Path(python).exists() or "/" not in python):
        raise SweetspotError(f"--vllm-python {python}: no such interpreter")
    backend = VllmBackend(
        model_dir, trials_dir=trials_dir, python=python, template=template,
        vllm_version=parse_vllm_version(version) if version else None, env=env,
        startup_timeout_s=startup_timeout, run_timeout_s=run_timeout, warmup_requests=warmup,
        dummy_weights=dummy_weights)
    return backend, serve_args


def _server_line(backend, args) -> str:
    """The exact command, runnable in a shell: the environment sweetspot sets, then argv."""
    import shlex

    from sweetspot._secrets import redact_args, redact_env
    from sweetspot.backends.vllm.server import DEFAULT_ENV

    env = {**{k: os.environ.get(k, v) for k, v in DEFAULT_ENV.items()}, **backend.env}
    argv = redact_args(backend.server_command(args))  # vLLM's own log shows '***' too
    return shlex.join(["env", *(f"{k}={v}" for k, v in redact_env(env).items()), *argv])


def _model_vocab(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _print_trial(trial) -> None:
    table = Table(title="Launched server", show_header=False)
    table.add_column("fact")
    table.add_column("value", justify="right")
    t, facts, memory = trial.timings, trial.startup, trial.memory

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


def _override_arrivals(wl, rate: str | None, concurrency: int | None, burstiness: float):
    from sweetspot.spec.workload import ArrivalSpec

    if rate is None and concurrency is None:
        return wl
    if rate is None or rate.strip().lower() == "inf":
        process = "closed" if rate is None else "inf"
        arrival = ArrivalSpec(process=process, concurrency=concurrency)
    else:
        try:
            value = float(rate)
        except ValueError:
            raise SweetspotError(f"--rate must be a number or inf, not {rate!r}") from None
        if not math.isfinite(value) or value <= 0:  # the burst is spelled "inf", above
            raise SweetspotError(f"--rate must be a positive number or inf, not {value:g}")
        process = "poisson" if burstiness == 1.0 else "gamma"
        arrival = ArrivalSpec(process=process, rate=value, burstiness=burstiness,
                              concurrency=concurrency)
    return dataclasses.replace(wl, arrival=arrival)


def _print_result(measurement) -> None:
    from sweetspot.metrics.serve import percentile_word

    r = measurement.result
    table = Table(title="Serving Benchmark Result", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("Successful requests", f"{r.completed}"),
        ("Failed requests", f"{r.failed}"),
        ("Benchmark duration (s)", f"{r.duration_s:.2f}"),
        ("Total input tokens", f"{r.total_input_tokens}"),
        ("Total generated tokens", f"{r.total_output_tokens}"),
        ("Request throughput (req/s)", f"{r.request_throughput:.2f}"),
        ("Output token throughput (tok/s)", f"{r.output_throughput:.2f}"),
        ("Total token throughput (tok/s)", f"{r.total_token_throughput:.2f}"),
    ]
    if r.request_goodput is not None:
        rows.append(("Request goodput (req/s)", f"{r.request_goodput:.2f}"))
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        stats = getattr(r, name)
        rows.append((f"Mean / median {label} (ms)",
                     f"{stats.mean_ms:.2f} / {stats.median_ms:.2f}"))
        for p, value in stats.percentiles_ms:  # the ones asked for, as vLLM names them
            rows.append((f"P{percentile_word(p)} {label} (ms)", f"{value:.2f}"))
    rows.append(("Client lag mean / max (ms)",
                 f"{r.mean_client_lag_ms:.2f} / {r.max_client_lag_ms:.2f}"))
    server = measurement.server
    if server is not None:
        for label, value in (("Preemptions", server.preemptions),
                             ("Prefix cache hit rate", server.prefix_cache_hit_rate),
                             ("Peak KV cache usage", server.peak_kv_cache_usage),
                             ("Max requests waiting", server.max_requests_waiting),
                             ("Spec decode acceptance", server.spec_acceptance_rate)):
            if value is not None:
                rows.append((f"server: {label}",
                             f"{value:.1%}" if isinstance(value, float) else f"{value}"))
    for label, value in rows:
        table.add_row(label, value)
    _out.print(table)
    for error, count in measurement.errors[:5]:
        _out.print(f"  failed x{count}: {error}", markup=False)


SettingsOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="knob=value, e.g. max_num_seqs=128 (repeatable).")]
CpuKvOpt = Annotated[float | None, typer.Option(
    "--cpu-kvcache-space", min=0.01, help="VLLM_CPU_KVCACHE_SPACE in GiB (CPU build).")]


def _sim_setup(model: str, gpu: str, quant: str | None, settings: list[str] | None,
               vllm_version: str, cpu_kv_gib: float | None, acceptance: float | None = None):
    from sweetspot.backends.sim import SimSetup
    from sweetspot.spec.knobs import parse_settings
    from sweetspot.spec.model import checkpoint_quantization, load_model

    hardware = load_hardware(gpu)
    resolved = load_model(model)
    q = checkpoint_quantization(model, resolved, load_quantization(quant) if quant else None)
    if acceptance is not None and not 0 <= acceptance <= 1:
        raise SweetspotError(f"--acceptance must be between 0 and 1, not {acceptance:g}")
    return SimSetup(hardware, resolved.arch, q, parse_settings(settings or []),
                    parse_vllm_version(vllm_version), spec_acceptance=acceptance,
                    cpu_kvcache_space_bytes=int(cpu_kv_gib * GiB) if cpu_kv_gib else None)


@app.command()
def simulate(
    model: ModelOpt = "qwen2.5-14b",
    gpu: Annotated[str, typer.Option(help="GPU from the catalog.")] = "a100-80gb",
    quant: QuantOpt = None,
    workload: WorkloadOpt = "chat",
    num_requests: Annotated[int | None, typer.Option(min=1)] = None,
    rate: Annotated[str | None, typer.Option(help="Requests per second, or inf.")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Most requests in flight; "
                                                         "alone it means a closed loop.")] = None,
    settings: SettingsOpt = None,
    vllm_version: VersionOpt = str(DEFAULT_VLLM_VERSION),
    calibration: Annotated[Path | None, typer.Option(help="Calibration file from `sweetspot "
                                                          "calibrate`.")] = None,
    acceptance: Annotated[float | None, typer.Option(help="Speculative acceptance per "
                                                          "position (0-1).")] = None,
    cpu_kvcache_space: CpuKvOpt = None,
    seed: Annotated[int | None, typer.Option()] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the result here.")
                         ] = None,
) -> int:
    """Predict what `sweetspot bench` would measure for a configuration, without a GPU.

    Exit 0: it ran; 1: vLLM would refuse the configuration (an oom names the tensor-parallel
    size that fits); 2: unusable input.
    """
    from sweetspot.backends.sim import simulate as run_sim
    from sweetspot.backends.sim.calibration import load_calibration
    from sweetspot.metrics.run import Measurement
    from sweetspot.metrics.serve import compute_result
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.requests import sample_requests

    setup = _sim_setup(model, gpu, quant, settings, vllm_version, cpu_kvcache_space, acceptance)
    step_model = None
    if calibration is not None:
        step_model = load_calibration(calibration, setup.hardware, setup.arch).step_model
    wl = _override_arrivals(load_workload(workload), rate, concurrency, 1.0)
    requests = sample_requests(wl, num_requests, seed=seed, vocab_size=setup.arch.vocab_size)
    run = run_sim(setup, requests, max_concurrency=concurrency, model=step_model,
                  seed=seed or 0)
    data: dict = {"status": run.status, "cause": run.cause}
    if run.status == "ok":
        result = compute_result(run.records)
        errors: dict[str, int] = {}
        for record in run.records:
            if record.error:
                errors[record.error] = errors.get(record.error, 0) + 1
        _print_result(Measurement(result, None, tuple(errors.items())))
        _print_sim_facts(run)
        data.update(result.to_dict())
        facts = run.facts
        data["simulator"] = {
            "kv_cache_tokens": facts.kv_cache_tokens, "max_concurrency": facts.max_concurrency,
            "peak_kv_usage": facts.peak_kv_usage, "preemptions": facts.preemptions,
            "prefix_cache_hit_rate": facts.prefix_hit_rate,
            "compute_bound_share": facts.compute_bound_share, "steps": facts.steps,
            "mean_batch": facts.mean_batch, "spec_acceptance_rate": facts.spec_acceptance_rate,
            "step_model": "calibrated" if step_model else "roofline"}
    else:
        _out.print(f"trial: {run.status} — {run.cause}", markup=False)
        unfit = _sim_unfit(setup, run) if run.status == "oom" else None
        if unfit is not None:
            hint = (f" (simulate it with --set tensor_parallel_size={unfit.tensor_parallel_size})"
                    if unfit.tensor_parallel_size else "")
            _out.print(unfit.message + hint, markup=False)
            data["fit"] = {"finding": unfit.message,
                           "tensor_parallel_size": unfit.tensor_parallel_size}
    data["sweetspot"] = {"model": setup.arch.name, "gpu": setup.hardware.name,
                         "quant": setup.quant.name, "vllm_version": str(setup.version),
                         "workload": wl.name, "num_requests": len(requests),
                         "config": {k: (v.to_dict() if hasattr(v, "to_dict") else v)
                                    for k, v in run.config.explicit().items()}}
    if json_path is not None:
        try:
            write_text(json_path, json.dumps(data, indent=2))
        except OSError as exc:
            raise SweetspotError(f"cannot write {json_path}: {exc}") from None
    return 0 if run.status == "ok" else 1


def _sim_unfit(setup, run):
    """The memory model's finding for a simulated start-up that failed: on how many GPUs the
    configuration would start."""
    from sweetspot.backends.sim.speculative import plan_speculation
    from sweetspot.engine.memory import fit_finding

    plan = plan_speculation(run.config.speculative, setup.arch, setup.spec_acceptance)
    return fit_finding(setup.arch, setup.quant, setup.hardware, run.config, setup.version,
                       draft=None if isinstance(plan, str) else plan.draft,
                       cpu_kvcache_space_bytes=setup.cpu_kvcache_space_bytes)


def _print_sim_facts(run) -> None:
    facts, memory = run.facts, run.memory
    table = Table(title="Simulated server", show_header=False)
    table.add_column("fact")
    table.add_column("value", justify="right")
    share = facts.compute_bound_share
    rows = [
        ("KV cache capacity (tokens)", f"{facts.kv_cache_tokens:,}"),
        (f"Max concurrency at {memory.max_model_len:,} tokens", f"{facts.max_concurrency:.2f}x"),
        ("Peak KV cache usage", f"{facts.peak_kv_usage:.1%}"),
        ("Preemptions", f"{facts.preemptions}"),
        ("Prefix cache hit rate",
         "-" if facts.prefix_hit_rate is None else f"{facts.prefix_hit_rate:.1%}"),
        ("Steps bound by compute / memory",
         "n/a (calibrated)" if share is None else f"{share:.0%} / {1 - share:.0%}"),
        ("Steps, mean batch", f"{facts.steps:,}, {facts.mean_batch:.1f}"),
    ]
    if facts.spec_acceptance_rate is not None:
        rows.append(("Spec decode acceptance", f"{facts.spec_acceptance_rate:.1%}"))
    for label, value in rows:
        table.add_row(label, value)
    _out.print(table)
    _out.print(facts.kv_log_line, markup=False)


@app.command()
def calibrate(
    results: Annotated[list[Path] | None, typer.Argument(
        help="Result JSONs of `sweetspot bench --json` against the server.")] = None,
    model: Annotated[str | None, typer.Option(
        help="Catalog name, HF id or folder with config.json (default: the study's, else "
             "qwen2.5-14b).")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU from the catalog (default: the study's, "
                                                 "else a100-80gb).")] = None,
    quant: QuantOpt = None,
    settings: Annotated[list[str] | None, typer.Option(
        "--set", help="knob=value, e.g. max_num_seqs=128 (repeatable); with --study, on top "
                      "of each trial's own configuration.")] = None,
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help=f"Target vLLM release (default: the study's, else "
                               f"{DEFAULT_VLLM_VERSION}).")] = None,
    cpu_kvcache_space: CpuKvOpt = None,
    url: Annotated[str | None, typer.Option(help="Benchmark this live server with a short "
                                                 "built-in profile instead.")] = None,
    study: Annotated[str | None, typer.Option(help="Fit on this study's own real trials "
                                                   "instead, each run with its trial's "
                                                   "configuration.")] = None,
    storage: Annotated[str | None, typer.Option(help="The study's storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")
                       ] = None,
    profile_requests: Annotated[int, typer.Option(min=8, help="Requests per profile run.")
                                ] = 96,
    profile_rounds: Annotated[int, typer.Option(min=1, help="Times the profile runs (--url); "
                                                "more average a host whose speed drifts.")
                              ] = 1,
    workload: Annotated[str | None, typer.Option(help="Lengths for the profile runs (preset "
                                                      "or file); default: a built-in mix.")
                        ] = None,
    vocab_size: Annotated[int, typer.Option(help="Prompt token ids are drawn below this "
                                                 "(profile).")] = 32_000,
    out: Annotated[Path, typer.Option(help="Calibration file to write.")] = Path(
        "calibration.json"),
    client_priority: ClientPriorityOpt = "normal",
) -> int:
    """Fit the simulator's step-time model to measured runs of one hardware + model, so
    `sweetspot simulate --calibration FILE` predicts that server."""
    from sweetspot.backends.sim import simulate as run_sim
    from sweetspot.backends.sim.calibration import (
        Calibration,
        observation_from_bench,
        save_calibration,
    )
    from sweetspot.backends.sim.cost import RooflineModel
    from sweetspot.backends.sim.fit import fit_step_model
    from sweetspot.metrics.run import bunched_streams

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
        loaded: list[tuple[str, dict]] = []
        for path in results or []:
            try:
                loaded.append((str(path), json.loads(path.read_text())))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise SweetspotError(f"cannot read {path}: {exc}") from None
        if url is not None:
            loaded += _profile_with_progress(url, profile_requests, vocab_size, workload,
                                             realtime, profile_rounds)
        if not loaded:
            raise SweetspotError("give result JSONs of `sweetspot bench --json`, --url or "
                                 "--study")
        pairs = [(data, observation_from_bench(data, label)) for label, data in loaded]
    for data, obs in pairs:
        if bunched_streams(data):
            kept = "its duration only" if obs.measured.get("duration") else "none of it"
            _err.print(f"note: {Path(obs.label).name}: its streams arrived in bursts "
                       f"({_bunched_words(data)}; a client or server short of CPU): fitting "
                       f"{kept}", markup=False)
    observations = [obs for _, obs in pairs if obs.measured]
    start = RooflineModel(setup.hardware, setup.arch, setup.quant)

    def simulate_run(obs, step_model):
        # A study's runs each had their trial's server; other runs share the one of --set.
        run_setup = setup if obs.config is None else dataclasses.replace(setup,
                                                                         config=obs.config)
        run = run_sim(run_setup, obs.requests, max_concurrency=obs.max_concurrency,
                      model=step_model, trace=True)
        if run.status != "ok":
            raise SweetspotError(f"{obs.label}: the simulator cannot start that server "
                                 f"configuration: {run.cause}")
        return run

    report = fit_step_model(observations, simulate_run, start)
    fitted = tuple({"run": run, "metric": metric, "measured": measured,
                    "predicted": predicted} for run, metric, measured, predicted in report.rows)
    save_calibration(out, Calibration.of(setup.hardware, setup.arch, setup.version,
                                         report.model, fitted))
    table = Table(title=f"calibration ({report.iterations} iterations) -> {out}")
    for column in ("run", "metric", "measured", "fitted", "error"):
        table.add_column(column)
    for row in fitted:
        table.add_row(Path(row["run"]).name, row["metric"], f"{row['measured']:.2f}",
                      f"{row['predicted']:.2f}",
                      f"{row['predicted'] / row['measured'] - 1:+.1%}")
    _out.print(table)
    return 0


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
    data = study_data(StudyStore.load(storage_url, name), storage_url)
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


@app.command()
def tune(
    model: Annotated[str | None, typer.Option(
        help=f"Catalog name, HF id or folder with config.json (default: {GUIDE_MODEL}).")
                     ] = None,
    gpu: Annotated[str | None, typer.Option(
        help="GPU from the catalog, cpu for the CPU build (default: a100-80gb).")] = None,
    quant: QuantOpt = None,
    workload: Annotated[str | None, typer.Option(
        help=f"Preset ({', '.join(PRESETS)}) or YAML/JSON file (default: chat at --rate "
             "auto).")] = None,
    rate: Annotated[str | None, typer.Option(
        help="Offered traffic in req/s, or auto: 65 % of the baseline's steady-state capacity "
             "(default: the workload's own rate; auto for the default workload).")] = None,
    acceptance: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Speculative acceptance per drafted token the simulator "
                               "assumes (default: per method).")] = None,
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help=f"Target vLLM release (default {DEFAULT_VLLM_VERSION}; "
                               "--backend vllm: the one --vllm-python has).")] = None,
    backend: Annotated[str, typer.Option(help="sim (predict), vllm (launch real servers), "
                                              "endpoint (the server at --url, as it runs: "
                                              "--strategy rate).")] = "sim",
    url: Annotated[str | None, typer.Option(help="A running server (backend endpoint).")
                   ] = None,
    num_requests: Annotated[int | None, typer.Option(
        min=4, help="Requests per run (default 300 simulated, 64 real).")] = None,
    slo: Annotated[str | None, typer.Option(
        help="e.g. p99_ttft=300ms,median_tpot=50ms; a bare ttft=300ms (or vLLM's ttft:300) "
             "means P99 (checked at the workload's own rate).")] = None,
    space: Annotated[list[str] | None, typer.Option(
        "--space", help="knob=v1,v2,... replaces or adds a dimension; knob= drops it "
                        "(repeatable).")] = None,
    space_file: Annotated[Path | None, typer.Option(help="YAML: knob -> [values] (null "
                                                         "drops).")] = None,
    fix: Annotated[list[str] | None, typer.Option(
        "--fix", help="knob=value pins a knob for the whole study: the baseline and every "
                      "trial carry it, the search leaves it alone (repeatable).")] = None,
    baseline: Annotated[str | None, typer.Option(
        help='Your current command, "vllm serve MODEL ..." (default: vLLM\'s defaults).')
                        ] = None,
    strategy: Annotated[str, typer.Option(help="auto (ofat, then optuna), ofat, grid, "
                                               "optuna, rate (the highest rate at which the "
                                               "baseline meets --slo).")] = "auto",
    objective: Annotated[str, typer.Option(help="throughput (TPE) or pareto (NSGA-II: "
                                                "throughput vs P99 latency).")] = "throughput",
    trials: Annotated[int | None, typer.Option(min=1, help="Configurations to run at most "
                                                     "(default 60 simulated, 8 real).")] = None,
    time_budget: Annotated[str | None, typer.Option(help="Wall time at most, e.g. 90s, "
                                                         "20m, 2h.")] = None,
    confirm: Annotated[int | None, typer.Option(
        min=0, help="Extra paired runs of the two finalists (default 7 simulated, 3 real: "
                    "each a server start).")] = None,
    memory_gib: Annotated[float | None, typer.Option(
        min=0.1, help="Memory-limited pick must fit this (GiB per GPU).")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    calibration: Annotated[Path | None, typer.Option(help="Calibration file for the "
                                                          "simulator.")] = None,
    study_name: Annotated[str | None, typer.Option(help="Name in the storage (default: "
                                                        "model-gpu-workload-time).")] = None,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (default "
                                                     "sqlite:///.sweetspot/studies.db).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the named study with "
                                                          "its stored settings.")] = False,
    report_dir: Annotated[Path | None, typer.Option(help="Report folder (default "
                                                         ".sweetspot/reports/STUDY).")] = None,
    vllm_python: Annotated[str | None, typer.Option(
        help="Interpreter with vLLM (backend vllm; default $SWEETSPOT_VLLM_PYTHON, else "
             "this one).")] = None,
    launch_template: Annotated[str | None, typer.Option(help="Launch command for vLLM "
                                                             "elsewhere (backend vllm).")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer folder (backend vllm).")
                         ] = None,
    server_env: Annotated[list[str] | None, typer.Option(
        "--env", help="KEY=VALUE for launched servers (repeatable).")] = None,
    server_args: Annotated[str | None, typer.Option(
        help='Fixed extra server options, e.g. "--enforce-eager" (backend vllm).')] = None,
    trials_dir: Annotated[Path, typer.Option(help="Launched servers' logs.")] = Path(
        ".sweetspot/trials"),
    client_priority: ClientPriorityOpt = "normal",
    dummy_weights: DummyWeightsOpt = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Backend vllm: print the baseline's server command and the first "
                          "sweep's (each knob changed alone), start nothing.")] = False,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
) -> int:
    """Find the best configuration: search the space on the simulator (default) or real vLLM,
    print four picks (max throughput, low latency, memory-limited, balanced) with commands,
    and write a report.

    Exit 0: picks (rate: a rate met the SLOs); 1: none — when every trial failed, the causes
    and, for memory, the tensor-parallel size that fits; 2: unusable input.
    """
    import time as _time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from sweetspot.tune.space import load_space_file, parse_fix_items, parse_space_items
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import StudySettings, run_study

    storage_url = storage or default_storage_url()
    if study_name is not None and report_dir is None:
        _check_name(study_name, "--study-name")
    changes = {}
    if space_file is not None:
        changes.update(load_space_file(space_file))
    changes.update(parse_space_items(space or []))
    fixed = parse_fix_items(fix or [])  # bad ones end here; clashes with --space: run_study
    if resume:
        if not study_name:
            raise SweetspotError("--resume needs --study-name")
        if fixed:  # its trials ran with the stored pins; others would mix two studies
            raise SweetspotError("--fix applies to a new study: a resumed one keeps the knobs "
                                 "it pinned")
        stored = StudyStore.load(storage_url, study_name).user_attrs.get("settings")
        if not stored:
            raise SweetspotError(f"study {study_name!r} has no sweetspot settings")
        settings = StudySettings.from_dict(stored).with_secrets()
        if settings.vllm.get("realtime_client"):  # still allowed here?
            _realtime_client("realtime")
        if trials is not None or time_budget is not None:  # a resumed study may get more
            settings = dataclasses.replace(
                settings, trials=trials if trials is not None else settings.trials,
                seconds=_parse_duration(time_budget) if time_budget else settings.seconds)
    else:
        settings = _new_settings(model, gpu, quant, workload, vllm_version, backend,
                                 num_requests, slo, baseline, strategy, objective, trials,
                                 time_budget, confirm, memory_gib, seed, calibration,
                                 study_name, vllm_python, launch_template, tokenizer,
                                 server_env, server_args, trials_dir, url, client_priority,
                                 dummy_weights, fixed, rate=rate, acceptance=acceptance)
    from sweetspot.backends.loadgen import request_headers

    settings = dataclasses.replace(settings, headers=request_headers(api_key, header or []))
    if dry_run:
        return _print_tune_commands(settings, changes)
    budget = settings.trials
    started = _time.monotonic()
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), console=_err,
                  transient=True) as progress:
        task = progress.add_task(f"study {settings.name}", total=budget)

        def on_trial(row: dict, best: dict | None) -> None:
            line = f"trial {row['number']} {row['status']}"
            if best is not None:
                line += (f" | best so far: trial {best['number']}, "
                         f"{best['metrics']['output_throughput']:,.0f} tok/s")
            progress.update(task, advance=1, description=line)

        data = run_study(settings, storage_url, resume=resume, space_changes=changes,
                         on_trial=on_trial,
                         on_phase=lambda text: progress.update(task, description=text))
    elapsed = _time.monotonic() - started
    _print_study(data, elapsed)
    out = report_dir or Path(".sweetspot") / "reports" / settings.name
    _write_report(data, out)
    for line in _all_failed(data):
        _out.print(line, markup=False)
    if settings.strategy == "rate":
        return 0 if (data.get("rate_search") or {}).get("max_rate") else 1
    return 0 if data["picks"] else 1


def _new_settings(model, gpu, quant, workload, vllm_version, backend, num_requests, slo,
                  baseline, strategy, objective, trials, time_budget, confirm, memory_gib,
                  seed, calibration, study_name, vllm_python, launch_template, tokenizer,
                  server_env, server_args, trials_dir, url=None, client_priority="normal",
                  dummy_weights=False, fixed=None, rate=None, acceptance=None):
    import shlex
    import time as _time

    from sweetspot.engine.lint import lint_command
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.workload import workload_to_dict
    from sweetspot.tune.evaluate import config_to_json, parse_slos
    from sweetspot.tune.space import value_label
    from sweetspot.tune.study import StudySettings
    from sweetspot.tune.tuner import STRATEGIES

    if backend not in ("sim", "vllm", "endpoint"):
        raise SweetspotError(f"--backend must be sim, vllm or endpoint, not {backend!r}")
    if dummy_weights and backend != "vllm":
        raise SweetspotError("--dummy-weights goes with --backend vllm (servers that sweetspot "
                             "starts)")
    if (backend == "endpoint") != (url is not None):
        raise SweetspotError("--url goes with --backend endpoint (a running server), and "
                             "--backend endpoint needs --url")
    if backend == "endpoint" and strategy != "rate":
        from sweetspot.tune.study import ENDPOINT_ONLY_RATE

        raise SweetspotError(ENDPOINT_ONLY_RATE)
    if strategy not in STRATEGIES:
        raise SweetspotError(f"--strategy must be one of {', '.join(STRATEGIES)}, not "
                             f"{strategy!r}")
    if objective not in ("throughput", "pareto"):
        raise SweetspotError(f"--objective must be throughput or pareto, not {objective!r}")
    if strategy == "rate" and not slo:
        raise SweetspotError("--strategy rate finds the highest rate that meets the SLOs: give "
                             "them with --slo, e.g. p99_ttft=2s,p99_tpot=60ms")
    demo = model is None and gpu is None and workload is None and baseline is None
    model, gpu = model or GUIDE_MODEL, gpu or "a100-80gb"
    python = vllm_python or os.environ.get("SWEETSPOT_VLLM_PYTHON") or sys.executable
    if backend == "vllm" and launch_template is None:
        version = _installed_vllm(python, vllm_version)
    else:
        version = parse_vllm_version(vllm_version)
    hardware = load_hardware(gpu)
    offered = _parse_rate(rate if rate is not None or workload is not None else "auto")
    if demo and backend == "sim":
        baseline = _guide_template(version)
        _out.print(f"baseline: the field guide's template for vLLM {version} "
                   f"({baseline.removeprefix('vllm serve ')})", markup=False)
    wl = load_workload(workload or "chat")
    slos = parse_slos(slo)
    if acceptance is not None and backend != "sim":
        raise SweetspotError("--acceptance is what the simulator assumes; a real server's "
                             "acceptance is measured (backend sim only)")
    from sweetspot.spec.model import checkpoint_quantization, load_model

    resolved = load_model(model)
    q = checkpoint_quantization(model, resolved, load_quantization(quant) if quant else None)
    config = None
    if baseline:
        report = lint_command(baseline, version, hardware)
        if report.errors:
            raise SweetspotError(f"--baseline: {report.errors[0].message}")
        config = report.config
    from sweetspot.spec.knobs import ServingConfig
    from sweetspot.tune.advise import _checkpoint

    model_ref = _checkpoint(model, resolved.arch, q, resolved.quantization)
    config = config or ServingConfig()
    if backend != "endpoint" and config.quantization is None and q.vllm_flag:
        # vLLM quantises at load time only when told (fp8): every trial's server must be, so
        # what is measured is what the picks' commands serve.
        config = config.replace(quantization=q.vllm_flag)
    seconds = _parse_duration(time_budget) if time_budget else None
    real = backend != "sim"  # measured, not predicted
    vllm: dict = {}
    if backend == "vllm":
        env = _env_items(server_env)
        vllm = {"python": python, "template": launch_template, "tokenizer": tokenizer,
                "env": env, "trials_dir": str(trials_dir),
                "args": shlex.split(server_args or "")}
        if dummy_weights:  # an option of every server, so a resumed study keeps it
            from sweetspot.backends.vllm.server import DUMMY_WEIGHTS

            vllm["args"] += DUMMY_WEIGHTS
            vllm["dummy_weights"] = True
    if backend == "endpoint":
        vllm = {"url": url}
    if client_priority == "realtime" and backend == "sim":
        raise SweetspotError("--client-priority realtime applies to measured backends "
                             "(vllm, endpoint): the simulator has no client")
    if _realtime_client(client_priority):
        vllm["realtime_client"] = True
    name = study_name or _slug(f"{resolved.arch.name}-{hardware.name}-{wl.name}-"
                               f"{_time.strftime('%Y%m%d-%H%M%S')}")
    return StudySettings(
        name=name, model=model_ref if not real else model, gpu=hardware.name,
        quant=q.name, vllm_version=str(version),
        workload=workload_to_dict(wl), num_requests=num_requests or (64 if real else 300),
        slos=slos, space={}, baseline=config_to_json(config),
        strategy=strategy, objective=objective,
        trials=trials or (None if seconds and not real else (8 if real else 60)),
        seconds=seconds, seed=seed,
        confirm_repeats=confirm if confirm is not None else (3 if real else 7),
        memory_limit_gib=memory_gib,
        backend=backend, vllm=vllm, calibration=str(calibration) if calibration else None,
        rate=offered, acceptance=acceptance,
        fixed={k: value_label(v) for k, v in (fixed or {}).items()})


def _guide_template(version) -> str:
    """The default demo's baseline: the field guide's "ultimate template" (its step 1: start
    from the template), as far as the target release has its flags — its --scheduling-policy
    lof and --num-scheduler-steps 8 do not exist in current releases, and a draft model runs
    only from DRAFT_MODEL_SINCE."""
    from packaging.version import Version

    from sweetspot.engine.releases import DRAFT_MODEL_SINCE, NUM_SCHEDULER_STEPS_REMOVED

    parts = ["vllm serve Qwen/Qwen2.5-14B-Instruct-AWQ --max-num-seqs 256",
             "--max-model-len 8192 --gpu-memory-utilization 0.95 --enable-prefix-caching"]
    if Version(str(version)) < NUM_SCHEDULER_STEPS_REMOVED:
        parts.append("--num-scheduler-steps 8")
    if Version(str(version)) >= DRAFT_MODEL_SINCE:
        parts.append("--speculative-config '{\"method\": \"draft_model\", \"model\": "
                     "\"Qwen/Qwen2.5-0.5B-Instruct\", \"num_speculative_tokens\": 8}'")
    return " ".join(parts)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def _check_name(name: str, flag: str) -> str:
    """A study's name becomes a folder (``.sweetspot/reports/NAME``): letters, digits and
    ``._+-``, never a path (``/``, ``..``) or a control character."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise SweetspotError(f"{flag} {name!r}: use letters, digits, '.', '_', '+' and '-' "
                             "(it names a folder), not a path")
    return name


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.") or "study"


def _parse_rate(text: str | None) -> float | str | None:
    """--rate: a positive req/s, "auto", or None (the workload's own)."""
    if text is None or text.strip().lower() == "auto":
        return None if text is None else "auto"
    try:
        value = float(text)
    except ValueError:
        raise SweetspotError(f"bad --rate {text!r}: a request rate (req/s) or auto") from None
    if not math.isfinite(value) or value <= 0:
        raise SweetspotError(f"bad --rate {text!r}: must be a positive number of req/s")
    return value


def _print_tune_commands(settings, changes: dict) -> int:
    """--dry-run: the exact server commands of the baseline and of the first sweep (each knob
    of the space changed alone from the baseline: what ofat and auto run first; grid and
    optuna combine the same values), built by the study's own backend. Nothing starts."""
    from sweetspot.engine.validate import validate_config
    from sweetspot.tune.space import value_label
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
                show(f"{dim.knob}={value_label(value)}", baseline.replace(**{dim.knob: value}))
    return 0


def _installed_vllm(python: str, asked: str | None):
    """The release the launched servers run: the vLLM ``python`` imports. A different
    --vllm-version would render the picks for a release no trial measured."""
    from sweetspot.backends.vllm.installed import detect_vllm

    installed = parse_vllm_version(str(detect_vllm(python).version))
    if asked is not None and parse_vllm_version(asked) != installed:
        raise SweetspotError(f"--vllm-version {asked}: {python} has vLLM {installed}, the "
                             "release the trials run; leave --vllm-version out, or use "
                             "--launch-template for another release")
    return installed


def _parse_duration(text: str) -> float:
    value = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(value[-1:])
    try:
        seconds = float(value[:-1] if scale else value) * (scale or 1)
    except ValueError:
        raise SweetspotError(f"bad duration {text!r}: expected e.g. 90s, 20m, 2h") from None
    if seconds <= 0:
        raise SweetspotError(f"bad duration {text!r}: must be positive")
    return seconds


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


def _write_report(data: dict, out: Path) -> None:
    from sweetspot.report import build_report

    try:
        files = build_report(data, out)
    except OSError as exc:
        raise SweetspotError(f"cannot write the report to {out}: {exc}") from None
    _out.print(f"report: {files.html} ({len(files.pngs)} figures, trial table "
               f"{files.trials_csv.name})", markup=False)


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
    from sweetspot.tune.store import StudyStore, default_storage_url
    from sweetspot.tune.study import study_data

    if out is None:
        _check_name(study, "study")
    url = storage or default_storage_url()
    data = study_data(StudyStore.load(url, study), url)
    for table in terminal_tables(data):
        _out.print(table)
    _write_report(data, out or Path(".sweetspot") / "reports" / study)
    return 0


@app.command("mock-server")
def mock_server(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port.")] = 8000,
    ttft_ms: Annotated[float, typer.Option(min=0, help="Admission to first token.")] = 50.0,
    itl_ms: Annotated[float, typer.Option(min=0, help="Between tokens of one request.")] = 10.0,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="Batch capacity; more requests "
                                                          "wait in a queue.")] = 256,
    tokens_per_chunk: Annotated[int, typer.Option(min=1)] = 1,
    fail_rate: Annotated[float, typer.Option(min=0, max=1, help="Share answered HTTP 500.")
                         ] = 0.0,
    drop_rate: Annotated[float, typer.Option(min=0, max=1, help="Share of streams cut "
                                                                "mid-way.")] = 0.0,
    seed: Annotated[int, typer.Option()] = 0,
    model_name: Annotated[str, typer.Option()] = "mock",
    api_key: Annotated[str | None, typer.Option(help="Answer /v1 requests without "
                                                     "'Authorization: Bearer KEY' with HTTP "
                                                     "401, as vLLM's --api-key does.")] = None,
) -> int:
    """A fast OpenAI-compatible streaming server with programmable timing, for tests, demos
    and measuring the client itself (not a stand-in for vLLM). Runs until Ctrl-C."""
    from sweetspot.testing.mock_server import MockServerConfig, run

    config = MockServerConfig(ttft_s=ttft_ms / 1e3, itl_s=itl_ms / 1e3,
                              max_num_seqs=max_num_seqs, tokens_per_chunk=tokens_per_chunk,
                              fail_rate=fail_rate, drop_rate=drop_rate, seed=seed,
                              model_name=model_name, api_key=api_key)
    try:
        run(config, host, port,
            on_ready=lambda url: _out.print(f"mock server listening on {url}", markup=False))
    except OSError as exc:
        raise SweetspotError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return 0


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
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.workload import workload_stats

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


testing_app = typer.Typer(help="Tools for tests and demos.", no_args_is_help=True)
app.add_typer(testing_app, name="testing")


@testing_app.command("make-model")
def make_model(
    folder: Annotated[Path, typer.Argument(help="Where to write model/ and tokenizer/.")],
    layers: Annotated[int, typer.Option(min=1)] = 2,
    hidden: Annotated[int, typer.Option(min=8)] = 256,
    heads: Annotated[int, typer.Option(min=1)] = 4,
    kv_heads: Annotated[int, typer.Option(min=1)] = 2,
    intermediate: Annotated[int, typer.Option(min=8, help="MLP width.")] = 512,
    vocab: Annotated[int, typer.Option(min=32)] = 4096,
    max_position: Annotated[int, typer.Option(min=16)] = 4096,
    tie_embeddings: Annotated[bool, typer.Option(help="LM head shares the embedding "
                                                     "(small models do; 7B and up do not).")
                              ] = True,
) -> int:
    """Write a tiny dummy-weight Qwen2 model folder and a separate exact-round-trip tokenizer
    (words w0 ... w<vocab-1>), for vLLM with --load-format dummy."""
    from sweetspot.testing.tiny_model import make_tiny_model

    if hidden % heads or heads % kv_heads:
        raise SweetspotError("hidden must be a multiple of heads, heads of kv-heads")
    try:
        tiny = make_tiny_model(folder, layers=layers, hidden=hidden, heads=heads,
                               kv_heads=kv_heads, intermediate=intermediate, vocab=vocab,
                               max_position=max_position, tie_embeddings=tie_embeddings)
    except OSError as exc:
        raise SweetspotError(f"cannot write the model to {folder}: {exc}") from None
    _out.print(f"model:     {tiny.model_dir}", markup=False)
    _out.print(f"tokenizer: {tiny.tokenizer_dir}", markup=False)
    _out.print(f"serve it:  python -m vllm.entrypoints.openai.api_server --model {tiny.model_dir} "
               f"--tokenizer {tiny.tokenizer_dir} --load-format dummy", markup=False)
    _out.print(f"bench it:  sweetspot bench --launch --dummy-weights -- {tiny.model_dir} "
               f"--tokenizer {tiny.tokenizer_dir}", markup=False)
    return 0


@app.command()
def catalog() -> int:
    """List the built-in GPUs and models."""
    _out.print("GPUs:   " + ", ".join(gpu_names()))
    _out.print("models: " + ", ".join(model_names()))
    _out.print("workload presets: " + ", ".join(PRESETS))
    return 0


_terminated = False


def _on_sigterm(signum, frame) -> None:
    """SIGTERM takes Ctrl-C's path (asyncio cancels the run, context managers stop launched
    servers); an exception raised straight from here could land in an event-loop callback,
    which would log it and carry on."""
    global _terminated
    _terminated = True
    signal.raise_signal(signal.SIGINT)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is one line on stderr, as an error is."""
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn every failure into an exit code."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    warnings.showwarning = _show_warning
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # Inherited from a shell that started us in the background (`cmd &` in a script, as
        # under nohup): SIGTERM's path to a clean stop goes through SIGINT, and a SIGINT sent
        # to sweetspot itself must stop its launched servers, not be lost.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = app(args=argv, prog_name="sweetspot", standalone_mode=False)
    except SweetspotError as exc:
        _fail(str(exc), 2)
    except (typer.Abort, KeyboardInterrupt):
        _fail("terminated", 143) if _terminated else _fail("interrupted", 130)
    except Exception as exc:
        # Typer vendors Click, so its usage errors are matched by shape, not by class.
        if callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code"):
            _fail(exc.format_message(), 2)
        if isinstance(exc, ImportError) and (missing := _missing_dependency(exc)):
            _fail(missing, 2)
        if os.environ.get("SWEETSPOT_DEBUG"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); "
              "rerun with SWEETSPOT_DEBUG=1 for the traceback", 70)
    if code == 130:  # Typer turns KeyboardInterrupt into exit code 130
        _fail("terminated", 143) if _terminated else _fail("interrupted", 130)
    sys.exit(code if isinstance(code, int) else 0)


# Import names whose pip package is spelled otherwise; any other installs as its own name.
_PIP_NAMES = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "prometheus_client": "prometheus-client"}


def _missing_dependency(exc: ImportError) -> str | None:
    """What to install for a third-party import a command failed on (commands import their
    heavy dependencies when they run, so a broken environment shows there, not at start-up);
    None for sweetspot's own modules, whose failure is a bug."""
    from importlib import metadata

    from packaging.requirements import Requirement

    module = (exc.name or "").split(".")[0]
    if not module or module == "sweetspot":
        return None
    package = _PIP_NAMES.get(module, module.replace("_", "-"))
    try:
        requirements = [Requirement(r) for r in metadata.requires("vllm-sweetspot") or ()]
    except metadata.PackageNotFoundError:  # run from a source tree
        requirements = []
    wanted = next((r for r in requirements if r.name.lower() == package.lower()), None)
    if module == "vllm":
        how = ("pip install vllm, or pass --vllm-python with an interpreter that has it "
               "(SWEETSPOT_VLLM_PYTHON)")
    elif wanted is not None and wanted.marker is not None and "extra" in str(wanted.marker):
        extra = str(wanted.marker).split("==")[-1].strip(" '\"")
        how = f"pip install 'vllm-sweetspot[{extra}]' (or pip install '{wanted}')"
    elif wanted is not None:
        how = f"pip install '{wanted}' (a dependency of vllm-sweetspot)"
    else:
        how = f"pip install {package}"
    if isinstance(exc, ModuleNotFoundError) and exc.name == module:
        return f"missing dependency: the Python package {package} is not installed; {how}"
    return f"the installed {package} lacks what sweetspot needs ({exc}); {how}"


def _fail(message: str, code: int) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
