"""`sweetspot advise`: four configurations from the memory model, without running anything."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.cli._common import (
    GUIDE_MODEL,
    ModelOpt,
    QuantOpt,
    VersionOpt,
    WorkloadOpt,
    _out,
    app,
)
from sweetspot.engine.releases import resolve_defaults
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import DEFAULT_VLLM_VERSION, parse_vllm_version

YamlDirOpt = Annotated[Path | None, typer.Option(help="Also write one vLLM YAML config per goal "
                                                      "here.")]


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
    from sweetspot.tune.advise import advise as make_advice

    version = parse_vllm_version(vllm_version)
    hardware = load_hardware(gpu)
    wl = _at_rate(load_workload(workload), rate)
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
    else:
        _print_advice(advice, hardware, version, wl)
    return 0


def _at_rate(wl, rate: float | None):
    """--rate: the workload's arrivals, Poisson at that rate."""
    from sweetspot.spec.workload import ArrivalSpec

    if rate is None:
        return wl
    if not math.isfinite(rate) or rate <= 0:
        raise SweetspotError(f"--rate must be a positive number of requests/s, not {rate:g}")
    return dataclasses.replace(wl, arrival=ArrivalSpec(process="poisson", rate=rate))


def _print_advice(advice, hardware, version, wl) -> None:
    """What the picks are sized for, one table of them, then each one's command and reasons,
    and where the field guide does not hold."""
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
