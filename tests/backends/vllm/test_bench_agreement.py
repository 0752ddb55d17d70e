"""sweetspot bench and vLLM's own ``vllm bench serve`` on one real server, same workload shape.

Two claims, checked apart:
- the definitions agree exactly: sweetspot's metrics function, fed the per-request times vLLM's
  client measured (``--save-detailed``), reproduces every number vLLM printed, key for key;
- the two clients measure the same server alike: the median over alternating rounds of the
  ratio of the two clients' numbers in one round (pairs cancel the machine's drift) within the
  issue's 10 %.

On this 2-core machine the client shares the CPU with the server it measures, so the server
here is one whose steps, not the client's events, take the CPU: a dummy model of 4 layers,
hidden 1024 (~465 output tok/s at concurrency 16). Against the shared 2-layer, hidden-256
server (~3,000 tok/s: 3,000 streamed events a second for the client to read) vLLM's heavier
client slowed the server it measured: sweetspot/vLLM output-throughput ratio 1.14 (median of
six shuffled rounds; single rounds 0.94 to 1.35), and with the drift on top CI read 1.205 in
one run and 0.881 in the next. Against this server five rounds read 0.96-1.01 on throughput
(median 0.98) and 0.87-1.04 on median TPOT (median 0.99): benchmarks/RESULTS.md. With three
rounds a median of 0.874 failed CI and a run alone (2026-12-07); five rounds read 1.02 and 0.98.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sweetspot.backends.vllm import ServerHandle, launch_server
from sweetspot.metrics.serve import compute_result
from sweetspot.testing.tiny_model import TinyModel
from sweetspot.testing.vllm_bench import records_from_detailed, run_vllm_bench_serve
from tests.backends.vllm.conftest import SERVER_ARGS, assert_group_gone
from tests.conftest import run_cli

NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN, CONCURRENCY, ROUNDS = 64, 128, 64, 16, 5
AGREEMENT = 0.10  # what the issue asks of output throughput and median TPOT


@pytest.fixture(scope="module")
def heavy_server(vllm_python: Path, heavy: TinyModel,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    with launch_server(vllm_python, heavy.model_dir, tokenizer_dir=heavy.tokenizer_dir,
                       args=SERVER_ARGS, dummy_weights=True,
                       log_path=tmp_path_factory.mktemp("heavy-server") / "vllm.log") as handle:
        yield handle
    assert_group_gone(handle.pid)


@pytest.mark.vllm
@pytest.mark.serial
def test_sweetspot_bench_agrees_with_vllm_bench_serve(
    heavy_server: ServerHandle, heavy: TinyModel, vllm_python: Path, tmp_path: Path
) -> None:
    def reference(seed: int) -> dict:
        return run_vllm_bench_serve(
            vllm_python, heavy_server.base_url, str(heavy.model_dir), tokenizer=heavy.tokenizer_dir,
            num_prompts=NUM_PROMPTS, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
            max_concurrency=CONCURRENCY, seed=seed, result_path=tmp_path / f"vllm{seed}.json",
            save_detailed=True,
        )

    workload = tmp_path / "random.yaml"
    workload.write_text(f"prompt: {{kind: fixed, value: {INPUT_LEN}}}\n"
                        f"output: {{kind: fixed, value: {OUTPUT_LEN}}}\n")
    # A fresh server's first batches run slower; warm it before measuring either client.
    warm = run_cli("bench", "--url", heavy_server.base_url, "--workload", str(workload),
                   "--num-requests", "32", "--concurrency", str(CONCURRENCY),
                   "--vocab-size", "4096", "--seed", "10")
    assert warm.returncode == 0, warm.stderr
    # A 2-core server drifts by several percent between runs of the same client, and one
    # disturbed run can move a number by 2x. So the clients alternate, round by round, and
    # their per-round ratios are compared (see the module docstring).
    theirs, ours = [], []
    with _clients_first():
        _alternate(reference, workload, heavy_server, tmp_path, theirs, ours)
    _check(theirs, ours)


@contextmanager
def _clients_first() -> Iterator[None]:
    """Both clients (spawned from here) real-time where allowed: on two cores beside the CPU
    build's busy-spinning engine, an ordinary client goes unscheduled for seconds and reads
    whole answers at once (seen in CI: one client's throughput 0.7x to 1.9x the other's in five
    rounds). The server, started earlier, keeps its ordinary priority."""
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def _alternate(reference, workload: Path, server: ServerHandle, tmp_path: Path, theirs: list,
               ours: list) -> None:
    for round_ in range(ROUNDS):
        theirs.append(reference(20 + round_))
        out = tmp_path / f"sweetspot{round_}.json"
        result = run_cli("bench", "--url", server.base_url, "--workload", str(workload),
                         "--num-requests", str(NUM_PROMPTS), "--concurrency", str(CONCURRENCY),
                         "--vocab-size", "4096", "--seed", str(30 + round_),
                         "--percentiles", "50,90,99", "--json", str(out))
        assert result.returncode == 0, result.stderr
        ours.append(json.loads(out.read_text()))


def _check(theirs: list, ours: list) -> None:
    for run in (*theirs, *ours):
        assert run["completed"] == NUM_PROMPTS and run["failed"] == 0
        assert run["total_output_tokens"] == NUM_PROMPTS * OUTPUT_LEN
    latency_keys = {k for k in ours[0]
                    if k.endswith(("_ttft_ms", "_tpot_ms", "_itl_ms", "_e2el_ms"))}
    assert len(latency_keys) == 4 * 6  # mean, median, std, p50, p90, p99 of four latencies
    assert set(theirs[0]) >= latency_keys
    # The definitions, exactly: vLLM's own per-request times through sweetspot's function.
    keys = (*sorted(latency_keys), "completed", "failed", "total_input_tokens",
            "total_output_tokens", "request_throughput", "output_throughput",
            "total_token_throughput")
    for run in theirs:
        recomputed = compute_result(records_from_detailed(run), duration_s=run["duration"],
                                    percentiles=(50, 90, 99)).to_dict()
        for key in keys:
            assert recomputed[key] == pytest.approx(run[key], rel=1e-9, abs=1e-9), key
    for key in ("output_throughput", "median_tpot_ms"):
        ratio = statistics.median(o[key] / t[key] for o, t in zip(ours, theirs, strict=True))
        print(f"{key}: sweetspot / vllm bench serve, median of {len(ours)} rounds {ratio:.3f} "
              f"(vLLM {', '.join(f'{r[key]:.2f}' for r in theirs)}; sweetspot "
              f"{', '.join(f'{r[key]:.2f}' for r in ours)})")
        assert ratio == pytest.approx(1.0, rel=AGREEMENT), (
            key, [r[key] for r in theirs], [r[key] for r in ours])
    # The client kept up: waits for one of the 16 slots are not counted as lag.
    assert all(r["mean_client_lag_ms"] < 5 for r in ours)
