"""Simulator fidelity against the published measurements of public-cases.md (P1-P8) and our own
GPU runs (P9-P15).

Prints a Markdown table (one row per measured value: prediction, signed error) and the summary
the issue bounds: median absolute error on throughputs and on latencies, the largest factor off.

    python benchmarks/fidelity.py
"""

from __future__ import annotations

import statistics
import time

from sweetspot.testing.public_cases import CASES, run_case


def main() -> None:
    started = time.perf_counter()
    outcomes = [o for case in CASES for o in run_case(case)]
    print("| case | run | metric | measured | simulated | error |")
    print("|---|---|---|---|---|---|")
    for o in outcomes:
        print(f"| {o.case_id} | {o.run} | {o.metric} | {o.measured:,.2f} | {o.predicted:,.2f} "
              f"| {o.error:+.0%} |")
    print()
    for kind in ("throughput", "latency"):
        errors = [abs(o.error) for o in outcomes if o.kind == kind]
        worst = max((o for o in outcomes if o.kind == kind), key=lambda o: o.factor)
        print(f"- {kind}: {len(errors)} values, median |error| {statistics.median(errors):.1%}, "
              f"worst {worst.case_id} {worst.run} {worst.metric} ({worst.factor:.2f}x)")
    print(f"- all cases simulated in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
