"""`mock-server`, `workload stats`, `testing make-model` and `catalog`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import _out, app
from sweetspot.spec.hardware import gpu_names
from sweetspot.spec.model import model_names
from sweetspot.spec.presets import PRESETS


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
