"""`sweetspot simulate`: one configuration on the embedded simulator."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import (
    CpuKvOpt,
    ModelOpt,
    QuantOpt,
    VersionOpt,
    WorkloadOpt,
    _out,
    _override_arrivals,
    _print_result,
    _sim_setup,
    _write_json,
    app,
)
from sweetspot.spec.version import DEFAULT_VLLM_VERSION

SettingsOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="knob=value, e.g. max_num_seqs=128 (repeatable).")]


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
    offline: Annotated[bool, typer.Option(
        "--offline", help="No API server: the engine in-process, as LLM.generate and `vllm "
                          "bench throughput` run it (every request at once, no warm-up).")
                       ] = False,
    endpoint: Annotated[str, typer.Option(
        help="completions (token ids) or chat (the server renders the chat template and "
             "tokenises: a longer serial intake per request).")] = "completions",
) -> int:
    """Predict what `sweetspot bench` would measure for a configuration, without a GPU.

    Exit 0: it ran; 1: vLLM would refuse the configuration (an oom names the tensor-parallel
    size that fits); 2: unusable input.
    """
    from sweetspot.spec.loaders import load_workload

    _check_front_end(offline, endpoint, rate, concurrency)
    setup = _sim_setup(model, gpu, quant, settings, vllm_version, cpu_kvcache_space, acceptance)
    setup = dataclasses.replace(setup, offline=offline, endpoint=endpoint)
    cal = None
    if calibration is not None:
        from sweetspot.backends.sim.calibration import load_calibration

        cal = load_calibration(calibration, setup.hardware, setup.arch)
    wl = _override_arrivals(load_workload(workload), "inf" if offline else rate, concurrency,
                            1.0)
    requests, prediction = _predict(setup, wl, num_requests, seed, cal, concurrency, offline)
    step_model = cal.step_model if cal else None
    run = prediction.run
    data: dict = {"status": run.status, "cause": run.cause}
    data.update(_print_ran(prediction, step_model) if run.status == "ok"
                else _print_refused(setup, run))
    data["sweetspot"] = {"model": setup.arch.name, "gpu": setup.hardware.name,
                         "quant": setup.quant.name, "vllm_version": str(setup.version),
                         "offline": offline, "endpoint": endpoint,
                         "workload": wl.name, "num_requests": len(requests),
                         "config": {k: (v.to_dict() if hasattr(v, "to_dict") else v)
                                    for k, v in run.config.explicit().items()}}
    if json_path is not None:
        _write_json(json_path, data)
    return 0 if run.status == "ok" else 1


def _check_front_end(offline: bool, endpoint: str, rate: str | None,
                     concurrency: int | None) -> None:
    from sweetspot.backends.sim.frontend import ENDPOINTS

    if offline and (concurrency is not None or rate not in (None, "inf")):
        raise SweetspotError("--offline hands the engine every request at once (LLM.generate):"
                             " leave out --rate and --concurrency")
    if endpoint not in ENDPOINTS:
        raise SweetspotError(f"--endpoint must be completions or chat, not {endpoint!r}")


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No garbage collection while the requests and the run's records are built: they live
    until the command ends, so each pass over them (~20 ms for 10,000 requests) would free
    nothing. Whatever is alive at the end is frozen: later passes, the one at exit included,
    skip it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def _predict(setup, wl, num_requests: int | None, seed: int | None, cal,
             concurrency: int | None, offline: bool):
    """The requests, and the prediction with its intervals and flags (a calibration's fit rows
    and range)."""
    from sweetspot.backends.sim.uncertainty import predict
    from sweetspot.spec.requests import sample_requests

    rated = wl.arrival.process in ("poisson", "gamma", "constant")
    with _collector_paused():
        requests = sample_requests(wl, num_requests, seed=seed,
                                   vocab_size=setup.arch.vocab_size)
        return requests, predict(
            setup, requests, max_concurrency=concurrency, model=cal.step_model if cal else None,
            seed=seed or 0, warmup=0 if offline else 1,
            fitted_on=cal.fitted_on if cal else None, covered=cal.covered if cal else None,
            offered_rate=wl.arrival.rate if rated else None)


def _print_ran(prediction, step_model) -> dict:
    """A run that started: the bench table, the intervals and flags, and the simulated
    server's facts, printed; the result's keys, the intervals and flags, and the simulator's
    own."""
    from sweetspot.metrics.run import Measurement

    run, result = prediction.run, prediction.result
    errors: dict[str, int] = {}
    for record in run.records:
        if record.error:
            errors[record.error] = errors.get(record.error, 0) + 1
    _print_result(Measurement(result, None, tuple(errors.items())))
    _print_intervals(prediction)
    _print_sim_facts(run)
    facts = run.facts
    return {**result.to_dict(), **prediction.to_dict(), "simulator": {
        "engine": facts.engine,
        "kv_cache_tokens": facts.kv_cache_tokens, "max_concurrency": facts.max_concurrency,
        "peak_kv_usage": facts.peak_kv_usage, "preemptions": facts.preemptions,
        "prefix_cache_hit_rate": facts.prefix_hit_rate,
        "compute_bound_share": facts.compute_bound_share, "steps": facts.steps,
        "mean_batch": facts.mean_batch, "spec_acceptance_rate": facts.spec_acceptance_rate,
        "step_model": "calibrated" if step_model else "roofline"}}


def _print_refused(setup, run) -> dict:
    """A configuration vLLM would refuse: the failed trial, and for an oom the memory model's
    finding (on how many GPUs it would start)."""
    _out.print(f"trial: {run.status} — {run.cause}", markup=False)
    unfit = _sim_unfit(setup, run) if run.status == "oom" else None
    if unfit is None:
        return {}
    hint = (f" (simulate it with --set tensor_parallel_size={unfit.tensor_parallel_size})"
            if unfit.tensor_parallel_size else "")
    _out.print(unfit.message + hint, markup=False)
    return {"fit": {"finding": unfit.message,
                    "tensor_parallel_size": unfit.tensor_parallel_size}}


def _sim_unfit(setup, run):
    """The memory model's finding for a simulated start-up that failed: on how many GPUs the
    configuration would start."""
    from sweetspot.backends.sim.speculative import plan_speculation
    from sweetspot.engine.memory import fit_finding

    plan = plan_speculation(run.config.speculative, setup.arch, setup.spec_acceptance)
    return fit_finding(setup.arch, setup.quant, setup.hardware, run.config, setup.version,
                       draft=None if isinstance(plan, str) else plan.draft,
                       cpu_kvcache_space_bytes=setup.cpu_kvcache_space_bytes)


_SHOWN = (("Output token throughput (tok/s)", "output_throughput", "{:,.0f}"),
          ("Request throughput (req/s)", "request_throughput", "{:,.2f}"),
          ("Median / P99 TTFT (ms)", ("median_ttft_ms", "p99_ttft_ms"), "{:,.0f}"),
          ("Median / P99 TPOT (ms)", ("median_tpot_ms", "p99_tpot_ms"), "{:,.1f}"),
          ("Median ITL (ms)", "median_itl_ms", "{:,.1f}"),
          ("Median E2EL (ms)", "median_e2el_ms", "{:,.0f}"))


def _print_intervals(prediction) -> None:
    """The main figures with their intervals (every key's is in the JSON), then the flags."""
    u = prediction.uncertainty
    table = Table(title=f"Prediction intervals (steps ±{u.relative:.0%}: {u.basis})",
                  show_header=False)
    table.add_column("metric")
    table.add_column("interval", justify="right")
    for label, keys, fmt in _SHOWN:
        parts = []
        for key in (keys,) if isinstance(keys, str) else keys:
            if key in prediction.intervals:
                low, high = prediction.intervals[key]
                parts.append(f"{fmt.format(low)}-{fmt.format(high)}")
        if parts:
            table.add_row(label, " / ".join(parts))
    _out.print(table)
    for flag in prediction.flags:
        _out.print(f"flag {flag.code}: {flag.message}", markup=False)


def _print_sim_facts(run) -> None:
    facts, memory = run.facts, run.memory
    table = Table(title="Simulated server", show_header=False)
    table.add_column("fact")
    table.add_column("value", justify="right")
    share = facts.compute_bound_share
    rows = [
        ("Engine", facts.engine),
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
