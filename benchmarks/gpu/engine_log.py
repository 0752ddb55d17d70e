"""The third witness of a real trial's capacity: vLLM's own log.

Every 10 s vLLM's engine logs "Avg generation throughput: Y tokens/s, Running: R reqs, Waiting:
W reqs". An interval is saturated when the one before it and itself both had a queue (W > 0):
the engine had more work than its batch all along. The mean generation throughput over those
intervals is the engine's own steady-state figure, to set beside the study's window (taken by
the client from its records) and the long closed loop of ``steady_check.py``.

    python benchmarks/gpu/engine_log.py DIR [DIR ...]   # folders holding trial-*/vllm.log
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LINE = re.compile(r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs, "
                  r"Waiting: (\d+) reqs")
ARGS = re.compile(r"non-default args: (\{.*\})")
KNOBS = re.compile(r"'(max_num_seqs|enable_prefix_caching)': (\w+)")


def saturated_rate(log: str) -> tuple[float | None, int, int]:
    """(mean generation tok/s over saturated intervals, their count, peak running)."""
    rows = [(float(g), int(r), int(w)) for g, r, w in LINE.findall(log)]
    rates = [rows[i][0] for i in range(1, len(rows)) if rows[i][2] > 0 and rows[i - 1][2] > 0]
    peak = max((r for _, r, _ in rows), default=0)
    return (sum(rates) / len(rates) if rates else None), len(rates), peak


def knobs(log: str) -> str:
    match = ARGS.search(log)
    if not match:
        return "?"
    found = dict(KNOBS.findall(match.group(1)))
    return (f"max_num_seqs={found.get('max_num_seqs', 'default')} "
            f"prefix_caching={found.get('enable_prefix_caching', 'default')}")


def main(folders: list[str]) -> int:
    for folder in folders:
        for log_path in sorted(Path(folder).glob("**/vllm.log")):
            log = log_path.read_text(errors="replace")
            rate, n, peak = saturated_rate(log)
            shown = f"{rate:8,.0f} tok/s over {n:2d} x 10 s" if rate else "   (never saturated)"
            print(f"{log_path.parent.name:12s} {knobs(log):44s} {shown}  peak running {peak}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
