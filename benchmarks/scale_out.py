"""Where a study's trials run, timed: one simulated study on ``local``, ``process`` and ``ray``
(a two-node Ray cluster started here, ``testing.ray_cluster``), and a study planned on N
emulated GPUs (``--emulate-gpus``) against the ideal makespan.

1. ``walls``: the same study (same seed, --in-flight 8) on each executor: wall time, the ratio
   to local, and whether the four picks are the same.
2. ``emulate``: a grid study of ``--trials`` simulated trials on N emulated GPUs for each N:
   makespan (a real trial's seconds), the ideal (every trial's time / N), efficiency.

Usage: python benchmarks/scale_out.py walls [--trials 64]
       python benchmarks/scale_out.py emulate [--trials 256] [--gpus 8,16,64] [--speedup 200]
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from sweetspot.cli._tune_settings import tune_settings
from sweetspot.cli.tune import tune
from sweetspot.testing.ray_cluster import local_ray_cluster
from sweetspot.tune.executors import Execution
from sweetspot.tune.study import run_study

IN_FLIGHT_PER_GPU = int(os.environ.get("IN_FLIGHT_PER_GPU", "8"))
OPTIONS = {"model": "qwen2.5-0.5b", "gpu": "l4", "workload": "short", "num_requests": 64,
           "confirm": 0, "seed": 3}


def _settings(**given):
    defaults = {name: p.default for name, p in inspect.signature(tune).parameters.items()}
    return tune_settings(SimpleNamespace(**{**defaults, **OPTIONS, **given})).study


def walls(trials: int) -> None:
    settings = _settings(trials=trials, study_name="walls")
    folder = Path(tempfile.mkdtemp())
    results = {}
    with local_ray_cluster([{"num_cpus": 1}, {"num_cpus": 1}]) as cluster:
        for name, execution in (
                ("local", Execution("local", in_flight=8)),
                ("process", Execution("process", in_flight=8)),
                ("ray (2 nodes x 1 CPU)", Execution("ray", in_flight=8,
                                                    ray_address=cluster.address))):
            started = time.monotonic()
            data = run_study(settings, f"sqlite:///{folder / (str(len(results)) + '.db')}",
                             resume=False, execution=execution)
            results[name] = (time.monotonic() - started,
                             [(p.goal, p.trial) for p in data.picks], len(data.trials))
    base = results["local"][0]
    print(f"{trials} trials, {os.cpu_count()} CPUs, {platform.node()}")
    print("| executor | wall s | x local | trials | same picks |")
    print("|---|---:|---:|---:|---|")
    for name, (wall, picks, n) in results.items():
        print(f"| {name} | {wall:.1f} | {wall / base:.2f} | {n} | "
              f"{'yes' if picks == results['local'][1] else 'NO'} |")


def emulate(trials: int, gpus: list[int], speedup: float) -> None:
    print(f"{trials} trials (grid), speedup {speedup:g}, {os.cpu_count()} CPUs")
    print("| GPUs | search trials | search makespan h | ideal h | efficiency | "
          "study trials | study makespan h | ideal h | efficiency | overrun h | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    folder = Path(tempfile.mkdtemp())
    for n in gpus:
        settings = _settings(trials=trials, study_name=f"e{n}", strategy="grid")
        started = time.monotonic()
        data = run_study(settings, f"sqlite:///{folder / f'e{n}.db'}", resume=False,
                         execution=Execution("ray", emulate_gpus=n, emulate_speedup=speedup,
                                           in_flight=IN_FLIGHT_PER_GPU * n))
        e = dict(data.emulation or {})
        cells = [f"{p['trials']} | {p['makespan_s'] / 3600:.2f} | {p['ideal_s'] / 3600:.2f} | "
                 f"{p['efficiency']:.1%}" for p in (e["search"], e)]
        print(f"| {n} | {' | '.join(cells)} | {e['overrun_s'] / 3600:.2f} | "
              f"{time.monotonic() - started:.0f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("walls", "emulate"))
    parser.add_argument("--trials", type=int)
    parser.add_argument("--gpus", default="8,16,64")
    parser.add_argument("--speedup", type=float, default=200.0)
    args = parser.parse_args()
    if args.what == "walls":
        walls(args.trials or 64)
    else:
        emulate(args.trials or 256, [int(g) for g in args.gpus.split(",")], args.speedup)


if __name__ == "__main__":
    main()
