"""`sweetspot bench`: measure one server (launched, or running) as `vllm bench serve` would."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.cli._common import (
    _BUNCHED,
    ApiKeyOpt,
    ClientPriorityOpt,
    DummyWeightsOpt,
    HeaderOpt,
    WorkloadOpt,
    _bunched_words,
    _env_items,
    _err,
    _out,
    _override_arrivals,
    _print_result,
    _realtime_client,
    _server_line,
    app,
)
from sweetspot.spec.hardware import GiB
from sweetspot.spec.version import parse_vllm_version


def _parse_floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise SweetspotError(f"bad {what} {text!r}: expected numbers separated by commas"
                             ) from None


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

    from sweetspot.backends.base import every_request_failed
    from sweetspot.backends.endpoint import run_endpoint
    from sweetspot.backends.loadgen import LoadConfig, check_server, request_headers
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
