"""How often `sweetspot compare` on the simulator calls a difference: its false-alarm rate on two
identical commands and its power on a pair whose capacities differ by about 10 %.

Each repetition is one whole `compare` (library call, as the CLI runs it) with its own seed: its
own request draws and its own server speeds (``--speed-spread``, default 1.5 %). Reported per
pair and spread: the share of repetitions per overall verdict, the share in which each guarded
metric was called better or worse, and the pairs run (the sequential stop).

The pair is the test's (``tests/guard/test_compare.py``): Qwen2.5-7B on the catalog A100-80GB,
max-num-seqs 16 against 18, fixed 64-token prompts and 32-token outputs offered at 25 req/s
(about 60 % of A's capacity), 60 requests a traffic run.

Usage: python benchmarks/compare_rates.py [--repetitions 200] [--spreads 0.02,0.03]
[--max-repeats 5] [--min-repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import inspect
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from sweetspot.cli._compare_settings import command_sides, plan_of
from sweetspot.cli.compare import compare
from sweetspot.guard.compare import Comparison, run_compare

A = "vllm serve qwen2.5-7b --max-num-seqs 16"
B = "vllm serve qwen2.5-7b --max-num-seqs 18"
WORKLOAD = ("prompt: {kind: fixed, value: 64}\noutput: {kind: fixed, value: 32}\n"
            "arrival: {process: poisson, rate: 25}\n")


def _run(a: str, b: str, workload: Path, **given) -> Comparison:
    defaults = {name: p.default for name, p in inspect.signature(compare).parameters.items()}
    options = SimpleNamespace(**{**defaults, "a": a, "b": b, "gpu": "a100-80gb",
                                 "workload": str(workload), "num_requests": 60, **given})
    side_a, side_b, notes = command_sides(options)
    return run_compare(side_a, side_b, plan_of(options), source="sim", notes=notes)


def _summary(label: str, results: list[Comparison], seconds: float) -> None:
    n = len(results)
    overall = collections.Counter(c.verdict for c in results)
    pairs = collections.Counter(len(c.runs) for c in results)
    print(f"\n{label}: {n} repetitions, {seconds / n:.2f} s each")
    print("  overall: " + ", ".join(f"{v} {k / n:.1%} ({k})" for v, k in overall.items()))
    print("  pairs run: " + ", ".join(f"{p}: {k}" for p, k in sorted(pairs.items())))
    for key in results[0].plan.guarded:
        called = collections.Counter(m.verdict for c in results for m in c.metrics
                                     if m.metric.key == key)
        print(f"  {key}: " + ", ".join(f"{v} {k / n:.1%}" for v, k in called.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--spreads", default="0.015")
    parser.add_argument("--min-repeats", type=int, default=3)
    parser.add_argument("--max-repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workload = Path(folder) / "fixed.yaml"
        workload.write_text(WORKLOAD)
        for spread in (float(s) for s in args.spreads.split(",")):
            for label, pair in (("identical", (A, A)), ("+10 % capacity", (A, B))):
                started = time.perf_counter()
                results = [_run(*pair, workload, seed=seed, speed_spread=spread,
                                min_repeats=args.min_repeats, max_repeats=args.max_repeats)
                           for seed in range(args.repetitions)]
                _summary(f"{label}, spread {spread:g}", results, time.perf_counter() - started)


if __name__ == "__main__":
    main()
