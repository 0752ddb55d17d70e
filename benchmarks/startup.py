"""Whole-process start-up time of the commands that should feel instant (issue 19: `sweetspot
--help` and `sweetspot lint` in 0.3 s or less): the median wall time of ``--runs`` fresh
processes each, beside a bare `python -c pass` (the interpreter's own floor on this machine).

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "sweetspot --help": [sys.executable, "-m", "sweetspot.cli", "--help"],
    "sweetspot lint": [sys.executable, "-m", "sweetspot.cli", "lint",
                       "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 64"],
}


def wall_s(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    for argv in COMMANDS.values():  # warm the file cache
        wall_s(argv)
    print("| command | median s | min s | max s |")
    print("| --- | ---: | ---: | ---: |")
    for name, argv in COMMANDS.items():
        times = [wall_s(argv) for _ in range(args.runs)]
        print(f"| `{name}` | {statistics.median(times):.3f} | {min(times):.3f} | "
              f"{max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
