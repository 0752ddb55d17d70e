"""Does a study's capacity figure hold up against a long run of the same server?

For each max-num-seqs value, one real vLLM server runs, back to back:

1. the capacity run `sweetspot tune` gives that configuration (a closed loop of the workload's
   lengths with twice the study's batch estimate in flight, sized as the study sizes it) and
   its steady-state capacity (``metrics.capacity``: the saturated window);
2. on the same server, a long closed loop with 1.5 x max-num-seqs in flight (the server always
   has a queue), ``--loop-times`` as many requests as the capacity run (default 2), read through
   the same saturated window: the steady state of a run long enough that its edges cannot matter.

Both come back as JSON (``--out``), with the ratio; issue 17 asks for agreement within 10 %.
The server's own log (vLLM's "Avg generation throughput" every 10 s, with the running and
waiting counts) is the third witness: the logs come back with the results.

    python benchmarks/gpu/steady_check.py --model M --tokenizer T --gpu h100 \
        --workload W.json --mns 32,128,1024 --server-args "--enforce-eager --max-model-len 4096" \
        --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import shlex
import sys
import time
from pathlib import Path

from sweetspot.backends.base import run_in_order
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.sim import SimSetup
from sweetspot.backends.vllm import VllmBackend
from sweetspot.metrics.capacity import steady_state
from sweetspot.metrics.run import measure
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import ArrivalSpec
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.resolve import batch_estimator


def _save_records(path: Path, run) -> None:
    """The run's per-request records (times to 0.1 ms), so that another capacity estimator can
    be tried on the same measurement offline."""
    rows = [{**dataclasses.asdict(r),
             "chunk_times_s": [round(t, 4) for t in r.chunk_times_s]} for r in run.records]
    with gzip.open(path, "wt") as f:
        json.dump({"duration_s": run.duration_s, "records": rows}, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--vllm-python", default=sys.executable)
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--num-requests", type=int, default=200)
    ap.add_argument("--mns", default="32,128,1024")
    ap.add_argument("--prefix-caching", default="true")
    ap.add_argument("--loop-times", type=float, default=2.0)
    ap.add_argument("--server-args", default="--enforce-eager --max-model-len 4096")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    hardware = load_hardware(args.gpu)
    resolved = load_model(args.model)
    workload = load_workload(args.workload)
    backend = VllmBackend(args.model, trials_dir=args.out / "trials",
                          tokenizer_dir=args.tokenizer, python=args.vllm_python,
                          hardware=hardware, extra_args=shlex.split(args.server_args),
                          dummy_weights=True)
    version = parse_vllm_version(str(backend.version))
    quant = resolved.quantization or resolved.arch.default_quantization()
    vocab = min(resolved.arch.vocab_size, 32_000)  # as a study draws prompt ids
    setup = SimSetup(hardware, resolved.arch, quant, ServingConfig(), version)
    evaluator = Evaluator(backend, workload, args.num_requests, {}, vocab_size=vocab,
                          batch_estimate=batch_estimator(setup, workload.prefix.length))
    lengths = dataclasses.replace(workload, arrival=ArrivalSpec(process="inf"))
    results = []
    for mns in (int(v) for v in args.mns.split(",")):
        config = ServingConfig(max_num_seqs=mns,
                               enable_prefix_caching=args.prefix_caching.lower() == "true")
        capacity_requests, capacity_in_flight = evaluator.capacity_plan(config, seed=0)
        in_flight = (3 * mns + 1) // 2
        loop_requests = sample_requests(lengths, round(args.loop_times * len(capacity_requests)),
                                        seed=1, vocab_size=vocab)
        started = time.monotonic()
        trial = run_in_order(backend, config, [
            (capacity_requests,
             LoadConfig(base_url="", model="", max_concurrency=capacity_in_flight)),
            (loop_requests, LoadConfig(base_url="", model="", max_concurrency=in_flight))])
        entry = {"max_num_seqs": mns, "prefix_caching": config.enable_prefix_caching,
                 "status": trial.status, "cause": trial.cause}
        if trial.ok:
            _save_records(args.out / "trials" / f"records-{mns}-capacity.json.gz", trial.run)
            for i, run in enumerate(trial.runs[1:]):
                _save_records(args.out / "trials" / f"records-{mns}-loop{i}.json.gz", run)
            steady = steady_state(trial.run.records, trial.run.duration_s)
            entry.update(capacity_requests=len(capacity_requests),
                         capacity_in_flight=capacity_in_flight,
                         capacity_tok_s=steady.output_throughput,
                         capacity_req_s=steady.request_throughput,
                         saturated=steady.saturated, peak_running=steady.peak_running,
                         window_s=steady.window_s,
                         capacity_plain_tok_s=measure(trial.run).result.output_throughput)
            if len(trial.runs) > 1:
                loop = measure(trial.runs[1])
                entry.update(loop_errors=dict(loop.errors), capacity_errors=dict(
                    measure(trial.run).errors))
                loop_run = trial.runs[1]
                long = steady_state(loop_run.records, loop_run.duration_s)
                rate, window = long.output_throughput, long.window_s
                entry.update(loop_requests=len(loop_requests), loop_concurrency=in_flight,
                             loop_tok_s=rate, loop_window_s=window,
                             ratio=steady.output_throughput / rate if rate else None)
        entry["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(entry), flush=True)
        results.append(entry)
        (args.out / "steady_check.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
