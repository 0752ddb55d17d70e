"""How fast each search strategy finds the best configuration, on the simulator, where the
whole grid is affordable.

The grid of the default space (every value of every dimension) is simulated once — cached in
``benchmarks/data/`` keyed by the setup — and the strategies then run against that table (a
lookup evaluator behind the same ``Tuner``), so each strategy sees exactly the values the grid
saw. The objective is the tuner's: capacity output throughput of the configurations that meet
the SLOs (a miss or a failure counts as 0). For each strategy and seed: best-so-far after each
trial; reported: the median over seeds of the trials needed to come within 3 % of the grid's
best, and the best reached within 15 % of the grid's size.

    python benchmarks/tune_search.py [--seeds 10] [--requests 100] [--jobs 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import platform
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import preset
from sweetspot.tune.evaluate import Evaluator, parse_slos
from sweetspot.tune.resolve import resolve_space_and_baseline
from sweetspot.tune.result import TrialResult
from sweetspot.tune.space import config_key
from sweetspot.tune.store import StudyStore
from sweetspot.tune.tuner import Budget, Tuner, config_from_json, make_sampler

HERE = Path(__file__).parent
# The field guide's own setup; the SLOs are applied to the grid's rows afterwards, so one
# simulated grid serves any SLO.
SETUP = {"model": "qwen2.5-14b", "gpu": "a100-80gb", "quant": "awq", "version": "0.33.0",
         "workload": "chat"}
SLOS = "p99_ttft=2s,p99_tpot=60ms"
# A starting point the search must climb from (the default: vLLM's own defaults, which the
# simulator puts within 3 % of the best for this setup, so the search starts at the top).
POOR_BASELINE = ServingConfig(max_num_seqs=16, enable_prefix_caching=False,
                              gpu_memory_utilization=0.85)
BASELINE = ServingConfig()
WITHIN = 0.03
SHARE = 0.15


def _parts(requests: int):
    version = parse_vllm_version(SETUP["version"])
    hardware = load_hardware(SETUP["gpu"])
    resolved = load_model(SETUP["model"])
    quant = load_quantization(SETUP["quant"])
    workload = preset(SETUP["workload"])
    space, baseline = resolve_space_and_baseline(None, {}, BASELINE, version, hardware,
                                                 resolved.arch, workload)
    setup = SimSetup(hardware, resolved.arch, quant, ServingConfig(), version)
    evaluator = Evaluator(SimBackend(setup), workload, requests, {}, vocab_size=32_000)
    return space, baseline, evaluator


def _evaluate_chunk(args) -> list[dict]:
    requests, configs = args
    _, _, evaluator = _parts(requests)
    return [evaluator.evaluate(config_from_json(c))[0].to_dict() for c in configs]


def grid_table(requests: int, jobs: int) -> tuple[dict[str, dict], float]:
    space, baseline, _ = _parts(requests)
    key = hashlib.sha256(json.dumps([SETUP, requests, [d.labels for d in space.dimensions]])
                         .encode()).hexdigest()[:12]
    cache = HERE / "data" / f"tune_grid_{key}.json"
    if cache.exists():
        data = json.loads(cache.read_text())
        return data["rows"], data["seconds"]
    import itertools

    from sweetspot.tune.evaluate import config_to_json

    dims = space.dimensions
    configs = [config_to_json(baseline.replace(**dict(zip([d.knob for d in dims], combo,
                                                          strict=True))))
               for combo in itertools.product(*(d.values for d in dims))]
    started = time.monotonic()
    chunks = [(requests, configs[i::jobs * 8]) for i in range(jobs * 8)]
    rows: dict[str, dict] = {}
    with ProcessPoolExecutor(jobs) as pool:
        for chunk, result in zip(chunks, pool.map(_evaluate_chunk, chunks), strict=True):
            for config, row in zip(chunk[1], result, strict=True):
                rows[config_key(config_from_json(config))] = row
    seconds = time.monotonic() - started
    cache.parent.mkdir(exist_ok=True)
    cache.write_text(json.dumps({"setup": SETUP, "requests": requests, "seconds": seconds,
                                 "rows": rows}))
    return rows, seconds


@dataclasses.dataclass
class LookupEvaluator:
    """The grid's answers behind the evaluator's interface."""

    table: dict[str, dict]
    slos: dict

    def evaluate(self, config, repeat: int = 0):
        row = TrialResult.from_dict(self.table[config_key(config)])
        return dataclasses.replace(row, slo_ok=meets(row, self.slos)), None


def meets(row: TrialResult, slos: dict) -> bool:
    m = row.metrics
    return (row.ran and not m.get("failed") and all(m[k] <= v for k, v in slos.items()))


def objective(row: TrialResult, slos: dict) -> float:
    return row.throughput if meets(row, slos) else 0.0


def run_strategy(strategy: str, seed: int, table: dict, budget: int, requests: int
                 ) -> list[float]:
    space, baseline, _ = _parts(requests)
    slos = parse_slos(SLOS)
    lookup = LookupEvaluator(table, slos)
    store = StudyStore.open(":memory:", f"{strategy}-{seed}", space, resume=False,
                            sampler=make_sampler("throughput", seed))
    curve: list[float] = []

    def on_trial(row, best):
        curve.append(max(curve[-1] if curve else 0.0, objective(row, slos)))

    tuner = Tuner(store, lookup, space, baseline, budget=Budget(trials=budget), seed=seed,
                  on_trial=on_trial)
    tuner.run(strategy)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--poor-baseline", action="store_true",
                        help="start from max-num-seqs 16, no prefix caching, utilisation 0.85")
    args = parser.parse_args()
    if args.poor_baseline:
        global BASELINE
        BASELINE = POOR_BASELINE
    table, grid_s = grid_table(args.requests, args.jobs)
    size = len(table)
    slos = parse_slos(SLOS)
    scores = [objective(r, slos) for r in table.values()]
    best = max(scores)
    budget = int(SHARE * size)
    near = sum(v >= (1 - WITHIN) * best for v in scores)
    print(f"grid: {size} configurations simulated in {grid_s:.0f} s; SLOs {SLOS}; best "
          f"objective {best:,.1f} tok/s; {sum(v > 0 for v in scores)} meet the SLOs, {near} "
          f"within 3 % of the best; budget {budget} trials ({SHARE:.0%})")
    results = {}
    for strategy in ("auto", "optuna", "grid", "ofat"):
        seeds = range(1 if strategy == "ofat" else args.seeds)
        curves = [run_strategy(strategy, s, table, budget, args.requests) for s in seeds]
        needed = [next((i + 1 for i, v in enumerate(c) if v >= (1 - WITHIN) * best), None)
                  for c in curves]
        finals = [c[-1] / best for c in curves]
        results[strategy] = (curves, needed, finals)
        hit = [n for n in needed if n is not None]
        print(f"{strategy:7s}: within 3 % after median "
              f"{statistics.median(hit) if len(hit) == len(needed) else 'never'} trials "
              f"(per seed: {needed}); best at budget / grid best: median "
              f"{statistics.median(finals):.3f}, worst {min(finals):.3f}; "
              f"{statistics.median(len(c) for c in curves)} trials run")
    _plot(results, best, budget)
    print(f"baseline: {BASELINE.explicit() or 'vLLM defaults'}")
    print(f"machine: {platform.node()} ({platform.machine()}); setup {SETUP}, SLOs {SLOS}; "
          f"{args.requests} requests per run")


def _plot(results, best: float, budget: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"auto": "auto (ofat, then TPE)", "optuna": "TPE", "grid": "grid-random",
              "ofat": "one knob at a time"}
    for strategy, (curves, _, _) in results.items():
        length = max(len(c) for c in curves)
        padded = np.array([c + [c[-1]] * (length - len(c)) for c in curves]) / best
        ax.plot(np.arange(1, length + 1), np.median(padded, axis=0), label=labels[strategy])
    ax.axhline(1 - WITHIN, color="grey", linestyle=":", label="3 % below the grid's best")
    ax.set_xlim(1, budget)
    ax.set_xlabel("trials")
    ax.set_ylabel("best so far / grid best (median of seeds)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(HERE / ("tune_search_poor.png" if BASELINE is POOR_BASELINE
                        else "tune_search.png"), dpi=110)


if __name__ == "__main__":
    main()
