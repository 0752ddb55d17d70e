"""The simulator's predictions for ``issue22.sh`` BATCH=3 (server C: a Llama-3.1-8B shape with
vLLM 0.24's defaults on an H100 or an H200): bursts through the API server, written before
the run.

    python benchmarks/gpu/i22_predict_round3.py [h100|h200]   # -> results-...-round3/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload

GPU = sys.argv[1] if len(sys.argv) > 1 else "h100"
OUT = Path(__file__).parent / "results-2026-12-07-issue22-round3" / f"predictions-{GPU}.json"
# (run, prompt tokens, output tokens, requests, seed): batch3() in issue22.sh
RUNS = (("e01-128-4-x150", 128, 4, 150, 11), ("e02-128-4-x600", 128, 4, 600, 12),
        ("e03-128-4-x1200", 128, 4, 1200, 13), ("e04-128-1-x600", 128, 1, 600, 14),
        ("e05-128-64-x600", 128, 64, 600, 15), ("e06-512-4-x600", 512, 4, 600, 16))


def main() -> None:
    model = load_model("llama-3.1-8b")
    setup = SimSetup(load_hardware(GPU), model.arch, model.arch.default_quantization(),
                     ServingConfig(max_model_len=32768), Version("0.24.0"))
    out = {}
    for name, prompt, output, n, seed in RUNS:
        workload = validate_workload({
            "name": name, "prompt": {"kind": "fixed", "value": prompt},
            "output": {"kind": "fixed", "value": output}, "arrival": {"process": "inf"}}, name)
        requests = sample_requests(workload, n, seed=seed, vocab_size=32000)
        run = simulate(setup, requests, warmup=1, fresh=True)
        result = compute_result(run.records)
        ttfts = np.sort([r.chunk_times_s[0] - r.sent_s for r in run.records])
        eleventh = float(ttfts[min(10, n - 1)])  # the first batch's, past the lone first request
        out[name] = {"request_throughput": result.request_throughput,
                     "duration": result.duration_s, "median_ttft_ms": result.ttft.median_ms,
                     "median_e2el_ms": result.e2el.median_ms, "t_11th_first_token_s": eleventh}
        print(f"{name:18s} req/s {result.request_throughput:8.1f}  duration "
              f"{result.duration_s:6.2f} s  median TTFT {result.ttft.median_ms:7.0f} ms  "
              f"11th first token {eleventh:.2f} s")
    OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
