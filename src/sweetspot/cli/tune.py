"""`sweetspot tune`: a study over the search space, its four picks and report."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Annotated

import typer

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    GUIDE_MODEL,
    ApiKeyOpt,
    ClientPriorityOpt,
    DummyWeightsOpt,
    HeaderOpt,
    QuantOpt,
    _check_name,
    _err,
    _out,
    _realtime_client,
    _server_line,
    _write_report,
    app,
)
from sweetspot.cli._study_print import all_failed, print_study
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.presets import PRESETS
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version


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
    print_study(data, elapsed_s=elapsed)
    out = report_dir or Path(".sweetspot") / "reports" / settings.name
    _write_report(data, out)
    for line in all_failed(data):
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

    from sweetspot.cli._server_options import server_options, vllm_python_path
    from sweetspot.engine.lint import lint_command
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.workload import workload_to_dict
    from sweetspot.tune.evaluate import config_to_json, parse_slos
    from sweetspot.tune.space import storage_label
    from sweetspot.tune.study import ENDPOINT_ONLY_RATE, StudySettings
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
    python = vllm_python_path(vllm_python)
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
        server = server_options(vllm_python, launch_template, server_env)
        vllm = {"python": server.python, "template": server.template, "tokenizer": tokenizer,
                "env": server.env, "trials_dir": str(trials_dir),
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
        fixed={k: storage_label(v) for k, v in (fixed or {}).items()})


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


