"""Issue 22's GPU runs beside the simulator: every run of ``issue22.sh`` simulated as it was sent.

Each run's JSON (``sweetspot bench --json --detailed``) names its workload, request count, seed,
vocabulary, arrival and concurrency; the same requests (same lengths, same token ids, so the
same shared prefixes) go through the simulator with the server's launch options, and the
prediction is printed beside the measurement:

    python benchmarks/gpu/i22_compare.py DIR/runs --gpu h200
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload

KEYS = ("request_throughput", "output_throughput", "median_ttft_ms", "median_tpot_ms",
        "median_itl_ms", "p99_ttft_ms")
# The servers issue22.sh starts: run-name prefix -> launch options.
SERVERS = {"a": ServingConfig(max_model_len=32768),
           "b": ServingConfig(max_model_len=4096, kv_cache_memory_bytes=8 << 30)}


def predict(run: dict, gpu: str, model: str, version: str, warmup: int) -> dict:
    meta = run["sweetspot"]
    spec = validate_workload(meta["workload_spec"], meta["workload"])
    requests = sample_requests(spec, meta["num_requests"], seed=meta["seed"],
                               vocab_size=meta["vocab_size"])
    arch = load_model(model).arch
    name = meta.get("_name", "a")
    setup = SimSetup(load_hardware(gpu), arch, arch.default_quantization(),
                     SERVERS[name[0]], Version(version))
    sim = simulate(setup, requests, max_concurrency=meta["max_concurrency"], warmup=warmup)
    if sim.status != "ok":
        return {"status": sim.status}
    return {**compute_result(sim.records).to_dict(), "preemptions": sim.facts.preemptions}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--model", default="qwen3-14b")
    ap.add_argument("--vllm-version", default="0.24.0")
    ap.add_argument("--json", type=Path, help="write every pair here")
    args = ap.parse_args()
    rows = {}
    print("| run | metric | measured | simulated | error |\n|---|---|---|---|---|")
    for path in sorted(args.runs.glob("*.json")):
        run = json.loads(path.read_text())
        run["sweetspot"]["_name"] = path.stem
        warmup = 0 if path.stem.startswith(("a01", "a03")) else 1
        sim = predict(run, args.gpu, args.model, args.vllm_version, warmup)
        rows[path.stem] = {"measured": {k: run.get(k) for k in KEYS},
                           "simulated": {k: sim.get(k) for k in KEYS}}
        for key in KEYS:
            m, s = run.get(key), sim.get(key)
            if m is None or s is None or not m or math.isnan(m):
                continue
            print(f"| {path.stem} | {key} | {m:,.2f} | {s:,.2f} | {s / m - 1:+.0%} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
