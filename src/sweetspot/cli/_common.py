"""What the commands share: the Typer app, the consoles, the options several commands
take, and the helpers more than one command uses."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.presets import PRESETS
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version

if TYPE_CHECKING:
    from sweetspot.tune.result import StudyResult

app = typer.Typer(
    name="sweetspot",
    help="Find the best launch configuration of a vLLM deployment for a GPU, model and traffic.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


_out = Console(highlight=False, soft_wrap=True, emoji=False)


_err = Console(stderr=True, emoji=False)


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


def _server_line(backend, args) -> str:
    """The exact command, runnable in a shell: the environment sweetspot sets, then argv."""
    import shlex

    from sweetspot._secrets import redact_args, redact_env
    from sweetspot.backends.vllm.server import DEFAULT_ENV

    env = {**{k: os.environ.get(k, v) for k, v in DEFAULT_ENV.items()}, **backend.env}
    argv = redact_args(backend.server_command(args))  # vLLM's own log shows '***' too
    return shlex.join(["env", *(f"{k}={v}" for k, v in redact_env(env).items()), *argv])


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


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def _check_name(name: str, flag: str) -> str:
    """A study's name becomes a folder (``.sweetspot/reports/NAME``): letters, digits and
    ``._+-``, never a path (``/``, ``..``) or a control character."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise SweetspotError(f"{flag} {name!r}: use letters, digits, '.', '_', '+' and '-' "
                             "(it names a folder), not a path")
    return name


def _write_json(path: Path, data: dict) -> None:
    """--json: the result, indented."""
    import json

    from sweetspot._files import write_text

    try:
        write_text(path, json.dumps(data, indent=2))
    except OSError as exc:
        raise SweetspotError(f"cannot write {path}: {exc}") from None


def _write_report(data: StudyResult, out: Path) -> None:
    from sweetspot.report import build_report

    try:
        files = build_report(data, out)
    except OSError as exc:
        raise SweetspotError(f"cannot write the report to {out}: {exc}") from None
    _out.print(f"report: {files.html} ({len(files.pngs)} figures, trial table "
               f"{files.trials_csv.name})", markup=False)

