"""Read the capacity of recorded runs again with the current estimator (``metrics.capacity``).

``steady_check.py`` keeps each run's per-request records (``records-<mns>-capacity.json.gz``,
``records-<mns>-loop0.json.gz`` beside the servers' logs), so a change to the capacity window
can be tried on a GPU measurement without a new lease:

    python benchmarks/gpu/replay_capacity.py DIR [DIR ...]   # folders holding records-*.json.gz

For each max-num-seqs: the capacity run's and the long loop's steady-state rate and window, and
their ratio (issue 17 asks for agreement within 10 %).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

from sweetspot.backends.records import RequestRecord
from sweetspot.metrics.capacity import SteadyState, steady_state

NAME = re.compile(r"records-(\d+)-(capacity|loop0)\.json\.gz$")


def read(path: Path) -> SteadyState:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    records = [RequestRecord(**{**r, "chunk_times_s": tuple(r["chunk_times_s"])})
               for r in data["records"]]
    return steady_state(records, data["duration_s"])


def main(folders: list[str]) -> int:
    if not folders:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    for folder in folders:
        runs: dict[int, dict[str, SteadyState]] = {}
        for path in sorted(Path(folder).glob("records-*.json.gz")):
            if m := NAME.search(path.name):
                runs.setdefault(int(m[1]), {})[m[2]] = read(path)
        for mns, pair in sorted(runs.items()):
            line = [f"{folder}  max-num-seqs {mns}:"]
            for kind in ("capacity", "loop0"):
                if kind in pair:
                    s = pair[kind]
                    line.append(f"{kind} {s.output_throughput:,.0f} tok/s "
                                f"[{s.window_s[0]:.1f}, {s.window_s[1]:.1f}] s")
            if len(pair) == 2 and pair["loop0"].output_throughput:
                ratio = pair["capacity"].output_throughput / pair["loop0"].output_throughput
                line.append(f"ratio {ratio:.3f}")
            print("  ".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
