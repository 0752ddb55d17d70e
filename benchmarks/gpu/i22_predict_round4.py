"""The simulator's predictions for ``issue22.sh`` BATCH=4 (server C: a Llama-3.1-8B shape with
vLLM 0.24's defaults on an H100 or an H200), written before the run: small-batch decode at
moderate load (closed loops of 256/256 at 1, 4 and 16; ShareGPT-like Poisson at 2 and 4 req/s),
the 128/64 burst and the 20000/200 closed loop of 4 again.

    python benchmarks/gpu/i22_predict_round4.py [h100|h200]   # -> results-...-round4/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.cli._common import _override_arrivals
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests

GPU = sys.argv[1] if len(sys.argv) > 1 else "h100"
HERE = Path(__file__).parent
OUT = HERE / "results-2026-12-07-issue22-round4" / f"predictions-{GPU}.json"
# (run, workload file, requests, rate, concurrency, seed): batch4() in issue22.sh, in order
RUNS = (("f01-decode-c1", "decode-256-256", 6, None, 1, 21),
        ("f02-decode-c4", "decode-256-256", 24, None, 4, 22),
        ("f03-decode-c16", "decode-256-256", 64, None, 16, 23),
        ("f04-sharegpt-poisson2", "sharegpt-228-202", 120, "2", None, 24),
        ("f05-sharegpt-poisson4", "sharegpt-228-202", 200, "4", None, 25),
        ("f06-128-64-x600", "random-128-64", 600, "inf", None, 26),
        ("f07-closed-20000-c4", "closed-20000-200", 24, None, 4, 27))


def main() -> None:
    model = load_model("llama-3.1-8b")
    setup = SimSetup(load_hardware(GPU), model.arch, model.arch.default_quantization(),
                     ServingConfig(max_model_len=32768), Version("0.24.0"))
    out = {}
    for i, (name, workload, n, rate, concurrency, seed) in enumerate(RUNS):
        spec = _override_arrivals(load_workload(str(HERE / "i22" / f"{workload}.json")),
                                  rate, concurrency, 1.0)
        requests = sample_requests(spec, n, seed=seed, vocab_size=32000)
        run = simulate(setup, requests, max_concurrency=concurrency, warmup=1, fresh=i == 0)
        r = compute_result(run.records)
        out[name] = {"request_throughput": r.request_throughput,
                     "output_throughput": r.output_throughput,
                     "median_ttft_ms": r.ttft.median_ms, "median_tpot_ms": r.tpot.median_ms,
                     "median_itl_ms": r.itl.median_ms}
        print(f"{name:22s} req/s {r.request_throughput:7.2f}  tok/s {r.output_throughput:8.1f}  "
              f"TTFT {r.ttft.median_ms:7.1f}  TPOT {r.tpot.median_ms:6.2f}  "
              f"ITL {r.itl.median_ms:6.2f} ms")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
