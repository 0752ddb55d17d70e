"""How fast the embedded simulator runs, and how its cost grows with request count and batch size.

Workload: ShareGPT-like (mean 200 prompt / 180 output tokens), every request at t=0 (rate inf,
i.e. saturation), Llama-3.1-8B on the catalog H100, vLLM 0.33.0. Only ``simulate()`` is timed for
the simulator's cost: CPU time of this process (``time.process_time``; the machine may be shared)
and wall time (``time.perf_counter``), best of ``--repeats``, each after a ``gc.collect()``.
Request sampling and ``compute_result`` (the ``vllm bench serve`` summary) are timed apart.

Three tables:

- headline: 10,000 requests with vLLM's defaults (``ServingConfig()``) and with
  ``max_num_seqs=256``: CPU and wall seconds, simulated requests/s (requests / CPU s), steps,
  mean batch, preemptions, and the sampling and ``compute_result`` times;
- request count: 2,500 to 40,000 requests (defaults): CPU s and µs per request, and the exponent
  b of cost ~ n^b from a least-squares fit on log-log axes (1 = linear, 2 = quadratic);
- batch size: ``max_num_seqs`` 16 to 1024 at 10,000 requests: CPU s, steps, mean batch, µs per
  request and per step, and the exponent b of CPU per step ~ mean batch^b (1 = a constant cost
  per request in the batch).

A fourth, ``whole process``, times the command a user runs, ``sweetspot simulate --gpu h100
--model llama-3.1-8b --workload <ShareGPT-like YAML> --num-requests N`` (rate inf), each in a
fresh interpreter: wall time and CPU time (user + system) of the child, best of
``--process-repeats``, and its peak RSS (``os.wait4``'s ``ru_maxrss``, the largest of the runs).
One untimed run first writes the bytecode caches, as an installed package has them.

Usage: python benchmarks/sim_speed.py [--repeats 3] [--counts 2500,5000,10000,20000,40000]
[--batches 16,64,256,1024] [--process-counts 10000,100000] [--process-repeats 5]
[--only-process]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
from packaging.version import Version

from sweetspot.backends.sim import SimFacts, SimRun, SimSetup, simulate
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.testing.public_cases import sharegpt_like

VERSION = Version("0.33.0")
MEAN_IN, MEAN_OUT = 200, 180
HEADLINE_N = 10_000


@dataclass(frozen=True)
class Timing:
    cpu_s: float
    wall_s: float


@dataclass(frozen=True)
class Measured:
    n: int
    sim: Timing
    max_num_seqs: int
    facts: SimFacts


def _timed(fn, *args):
    """Call ``fn(*args)``; return its result and (CPU s, wall s)."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = fn(*args)
    return result, Timing(time.process_time() - cpu0, time.perf_counter() - wall0)


def _best(timings: list[Timing]) -> Timing:
    return Timing(min(t.cpu_s for t in timings), min(t.wall_s for t in timings))


def _setup(config: ServingConfig) -> SimSetup:
    hw, model = load_hardware("h100"), load_model("llama-3.1-8b")
    return SimSetup(hw, model.arch, model.arch.default_quantization(), config, VERSION)


def _requests(setup: SimSetup, n: int):
    return sample_requests(sharegpt_like(MEAN_IN, MEAN_OUT), n, seed=0,
                           vocab_size=setup.arch.vocab_size)


def _simulate_once(setup: SimSetup, requests):
    """One timed ``simulate``, after freeing the previous run's objects (outside the clock)."""
    gc.collect()
    run, timing = _timed(simulate, setup, requests)
    if run.status != "ok":
        raise SystemExit(f"simulation failed: {run.status}: {run.cause}")
    return run, timing


def _measure(setup: SimSetup, requests, repeats: int) -> tuple[Measured, SimRun]:
    """Best of ``repeats`` timings of ``simulate`` alone, and the last run."""
    timings = []
    for _ in range(repeats):
        run = None  # let the previous run go before the next starts
        run, timing = _simulate_once(setup, requests)
        timings.append(timing)
    measured = Measured(len(requests), _best(timings), run.config.max_num_seqs, run.facts)
    return measured, run


def _fit_exponent(xs, ys) -> float:
    slope, _ = np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)
    return float(slope)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _machine_line() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"Machine: {model}, {os.cpu_count()} CPUs (nproc), Python "
            f"{platform.python_version()}; {datetime.date.today().isoformat()}")


def headline(repeats: int) -> str:
    header = ["config", "max_num_seqs", "simulate CPU s", "simulate wall s",
              "simulated req/s", "steps", "mean batch", "preemptions",
              "sample_requests CPU s", "compute_result CPU s", "output tok/s (simulated)"]
    rows = []
    for label, config in (("defaults", ServingConfig()),
                          ("max_num_seqs=256", ServingConfig(max_num_seqs=256))):
        setup = _setup(config)
        requests, sample_t = _timed(_requests, setup, HEADLINE_N)
        m, run = _measure(setup, requests, repeats)
        result, result_t = _timed(compute_result, run.records)
        del run
        facts = m.facts
        rows.append([label, str(m.max_num_seqs), f"{m.sim.cpu_s:.3f}",
                     f"{m.sim.wall_s:.3f}", f"{m.n / m.sim.cpu_s:,.0f}", f"{facts.steps:,}",
                     f"{facts.mean_batch:.1f}", str(facts.preemptions),
                     f"{sample_t.cpu_s:.3f}", f"{result_t.cpu_s:.3f}",
                     f"{result.output_throughput:,.0f}"])
    return _table(header, rows)


def by_count(counts: list[int], repeats: int) -> str:
    setup = _setup(ServingConfig())
    measured = [_measure(setup, _requests(setup, n), repeats)[0] for n in counts]
    rows = [[f"{m.n:,}", f"{m.sim.cpu_s:.3f}", f"{m.sim.wall_s:.3f}",
             f"{1e6 * m.sim.cpu_s / m.n:.1f}", f"{m.facts.steps:,}",
             f"{m.facts.mean_batch:.1f}"] for m in measured]
    table = _table(["requests", "CPU s", "wall s", "CPU µs / request", "steps", "mean batch"],
                   rows)
    b = _fit_exponent([m.n for m in measured], [m.sim.cpu_s for m in measured])
    return f"{table}\n\nFitted exponent b in CPU s ~ requests^b: {b:.2f}"


def by_batch(batches: list[int], repeats: int) -> str:
    measured = []
    for size in batches:
        setup = _setup(ServingConfig(max_num_seqs=size))
        measured.append(_measure(setup, _requests(setup, HEADLINE_N), repeats)[0])
    rows = [[str(m.max_num_seqs), f"{m.sim.cpu_s:.3f}", f"{m.facts.steps:,}",
             f"{m.facts.mean_batch:.1f}", f"{1e6 * m.sim.cpu_s / m.n:.1f}",
             f"{1e6 * m.sim.cpu_s / m.facts.steps:.1f}"] for m in measured]
    table = _table(["max_num_seqs", "CPU s", "steps", "mean batch", "CPU µs / request",
                    "CPU µs / step"], rows)
    b = _fit_exponent([m.facts.mean_batch for m in measured],
                      [m.sim.cpu_s / m.facts.steps for m in measured])
    return f"{table}\n\nFitted exponent b in CPU µs / step ~ mean batch^b: {b:.2f}"


# The ShareGPT-like workload of the timed command (lognormal lengths, means ~200 in / ~180 out).
SHAREGPT_YAML = """name: sharegpt-like
prompt: {kind: lognormal, median: 127.4, sigma: 1.0, min: 4, max: 1024}
output: {kind: lognormal, median: 127.2, sigma: 0.85, min: 4, max: 1024}
arrival: {process: inf}
"""


@dataclass(frozen=True)
class ProcessRun:
    wall_s: float
    cpu_s: float  # user + system of the child
    peak_rss_mb: float


def _run_process(command: list[str], env: dict[str, str]) -> ProcessRun:
    """One child, waited for with ``os.wait4`` so its own rusage comes back."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {child.stderr.read().decode()[-500:]}")
    child.stderr.close()
    return ProcessRun(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def whole_process(counts: list[int], repeats: int) -> str:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workload = os.path.join(tmp, "sharegpt-like.yaml")
        with open(workload, "w") as f:
            f.write(SHAREGPT_YAML)
        for n in counts:
            command = [sys.executable, "-m", "sweetspot.cli", "simulate", "--gpu", "h100",
                       "--model", "llama-3.1-8b", "--workload", workload,
                       "--num-requests", str(n)]
            _run_process(command, env)  # bytecode caches written, files in the page cache
            runs = [_run_process(command, env) for _ in range(repeats)]
            rows.append([f"{n:,}", f"{min(r.wall_s for r in runs):.2f}",
                         f"{min(r.cpu_s for r in runs):.2f}",
                         f"{max(r.peak_rss_mb for r in runs):.0f}"])
    return _table(["requests", "wall s (best)", "CPU s (best)", "peak RSS MB"], rows)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings per case; best is kept")
    parser.add_argument("--counts", type=_ints, default=[2_500, 5_000, 10_000, 20_000, 40_000],
                        help="request counts for the scaling table (comma-separated)")
    parser.add_argument("--batches", type=_ints, default=[16, 64, 256, 1024],
                        help="max_num_seqs values for the batch table (comma-separated)")
    parser.add_argument("--process-counts", type=_ints, default=[10_000, 100_000],
                        help="request counts for the whole-process table (comma-separated)")
    parser.add_argument("--process-repeats", type=int, default=5,
                        help="whole-process runs per count; the best wall and CPU are kept")
    parser.add_argument("--only-process", action="store_true",
                        help="only the whole-process table")
    args = parser.parse_args()
    print(_machine_line())
    print(f"\nWhole process: `sweetspot simulate` of ShareGPT-like requests, rate inf, "
          f"Llama-3.1-8B on H100 (default vLLM), best of {args.process_repeats}\n")
    print(whole_process(args.process_counts, args.process_repeats))
    if args.only_process:
        return
    print(f"\nHeadline: {HEADLINE_N:,} ShareGPT-like requests ({MEAN_IN} in / {MEAN_OUT} out), "
          f"rate inf, Llama-3.1-8B on H100, vLLM {VERSION}, best of {args.repeats}\n")
    print(headline(args.repeats))
    print("\nScaling with request count (defaults config)\n")
    print(by_count(args.counts, args.repeats))
    print(f"\nScaling with batch size ({HEADLINE_N:,} requests)\n")
    print(by_batch(args.batches, args.repeats))


if __name__ == "__main__":
    main()
