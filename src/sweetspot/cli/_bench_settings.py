"""`sweetspot bench`'s options as one checked settings object, built before anything starts:
a typo costs milliseconds, not a server start. The checks run in a fixed order, so that of
several mistakes the same one is reported first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict

from sweetspot._errors import SweetspotError
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.cli._common import _override_arrivals, _realtime_client
from sweetspot.cli._server_options import ServerOptions, server_options
from sweetspot.metrics.slo import Slos
from sweetspot.spec.workload import WorkloadSpec


class Launch(BaseModel):
    """--launch: the vLLM server sweetspot starts for the run (one trial)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    model_dir: str  # MODEL, after --
    serve_args: list[str]  # the vllm serve options after MODEL
    server: ServerOptions  # the interpreter or launch template, and the environment
    vllm_version: Any  # --vllm-version parsed (a launch template needs it), or None
    trials_dir: Path  # the server's log
    startup_timeout_s: float
    run_timeout_s: float | None
    keep_server: bool
    dummy_weights: bool
    dry_run: bool  # print the server command, start nothing


class BenchSettings(BaseModel):
    """One `sweetspot bench` run: what to send, where, and what to report."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    url: str | None  # the running server; None with --launch
    launch: Launch | None
    load: LoadConfig  # the client; its model is --model's ("" when not given)
    workload: WorkloadSpec  # the preset or file, with --rate, --concurrency, --burstiness
    num_requests: int | None  # None: the workload's own
    seed: int | None  # None: the workload's own
    vocab_size: int | None  # None: the launched model's vocabulary, else 32,000
    slos: Slos
    percentiles: tuple[float, ...]  # --percentiles, then any an SLO needs measured
    metrics_interval_s: float  # between /metrics samples; 0: none
    json_path: Path | None
    detailed: bool = False  # --json also holds the per-request arrays (vLLM's --save-detailed)


def bench_settings(o: SimpleNamespace) -> BenchSettings:
    """``o``: the command's options by name (``o.ctx.args``: what follows --)."""
    from sweetspot.metrics.slo import parse_slos
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.tokens import tokenizer_counter

    _check_target(o)
    slos = parse_slos(o.slo)
    percentiles = _percentiles(o.percentiles, slos.percentiles)
    counter = tokenizer_counter(o.tokenizer) if o.tokenizer else None
    workload = _override_arrivals(load_workload(o.workload, counter), o.rate, o.concurrency,
                                  o.burstiness)
    load = _load_config(o)
    return BenchSettings(
        url=o.url, launch=_launch(o) if o.launch else None, load=load, workload=workload,
        num_requests=o.num_requests, seed=o.seed, vocab_size=o.vocab_size, slos=slos,
        percentiles=percentiles, metrics_interval_s=o.metrics_interval, json_path=o.json_path,
        detailed=o.detailed)


def _check_target(o: SimpleNamespace) -> None:
    """One server, running (--url) or launched (--launch, its options after --)."""
    if o.endpoint not in ("completions", "chat"):
        raise SweetspotError(f"--endpoint must be completions or chat, not {o.endpoint!r}")
    if o.detailed and o.json_path is None:
        raise SweetspotError("--detailed adds per-request data to --json's file: give --json")
    if o.launch == (o.url is not None):
        raise SweetspotError("give either --url (a running server) or --launch (start one)")
    if o.ctx.args and not o.launch:
        raise SweetspotError(f"unexpected arguments: {' '.join(o.ctx.args)} (server options "
                             "go after --launch ... --)")
    if (o.dummy_weights or o.dry_run) and not o.launch:
        raise SweetspotError(f"{'--dummy-weights' if o.dummy_weights else '--dry-run'} goes "
                             "with --launch (a server that sweetspot starts)")


def _percentiles(text: str, needed: tuple[float, ...] = ()) -> tuple[float, ...]:
    """--percentiles, checked before the run, then any an SLO needs measured."""
    try:
        pcts = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise SweetspotError(f"bad percentiles {text!r}: expected numbers separated by commas"
                             ) from None
    if bad := [p for p in pcts if not 0 <= p <= 100]:
        raise SweetspotError(f"bad percentiles {text!r}: each must be from 0 to 100, not "
                             f"{bad[0]:g}")
    return tuple(sorted(dict.fromkeys((*pcts, *needed))))


def _load_config(o: SimpleNamespace) -> LoadConfig:
    from sweetspot.backends.loadgen import request_headers

    return LoadConfig(base_url=o.url or "", model=o.model or "", endpoint=o.endpoint,
                      max_concurrency=o.concurrency, timeout_s=o.timeout,
                      warmup_requests=o.warmup, processes=o.processes,
                      realtime=_realtime_client(o.client_priority),
                      headers=request_headers(o.api_key, o.header or []))


def _launch(o: SimpleNamespace) -> Launch:
    from sweetspot.backends.vllm import split_serve_command
    from sweetspot.spec.version import parse_vllm_version

    model_dir, serve_args = split_serve_command(o.ctx.args)
    if model_dir is None:
        raise SweetspotError("--launch needs the model: sweetspot bench --launch [options] -- "
                             "MODEL [vllm serve options]")
    server = server_options(o.vllm_python, o.launch_template, o.server_env)
    if o.launch_template is None and not (Path(server.python).exists()
                                          or "/" not in server.python):
        raise SweetspotError(f"--vllm-python {server.python}: no such interpreter")
    return Launch(model_dir=model_dir, serve_args=serve_args, server=server,
                  vllm_version=parse_vllm_version(o.vllm_version) if o.vllm_version else None,
                  trials_dir=o.trials_dir, startup_timeout_s=o.startup_timeout,
                  run_timeout_s=o.run_timeout, keep_server=o.keep_server,
                  dummy_weights=o.dummy_weights, dry_run=o.dry_run)
