"""Does a change to the simulator keep every simulated result? A fixed, varied set of scenarios,
each simulated and dumped exactly (every request record with its token times, the simulated
server's facts, the ``vllm bench serve`` summary), so two versions of the code can be compared
byte for byte: speed work must reproduce the dump exactly, floats included.

Scenarios cover the scheduler's paths: ShareGPT-like saturation (defaults and a small batch),
shared prefixes and repeated prompts (prefix cache hits and LRU eviction of cached blocks), a KV
cache over-subscribed into many preemptions (with and without the prefix cache, before and after
0.19's whole-prompt admission), priority scheduling, chunked prefill off, a long-prefill cap,
speculative decoding, the V0 engine (single- and multi-step), a closed loop, Poisson arrivals,
offline, and ``predict`` (the CLI's path, with its intervals). The sampled requests themselves
are dumped too (digests of token ids, lengths, arrivals), so a change to sampling is checked.

Usage:
    python benchmarks/sim_equivalence.py --write ref.txt   # dump the current code's results
    python benchmarks/sim_equivalence.py --check ref.txt   # compare; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from collections.abc import Callable, Iterator

from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.backends.sim.uncertainty import predict
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import Request, sample_requests
from sweetspot.spec.workload import validate_workload
from sweetspot.testing.public_cases import sharegpt_like

ARCH = load_model("llama-3.1-8b").arch
KV_PER_TOKEN = ARCH.kv_bytes_per_token()


def _setup(version: str = "0.33.0", **config) -> SimSetup:
    return SimSetup(load_hardware("h100"), ARCH, ARCH.default_quantization(),
                    ServingConfig(**config), Version(version))


def _sharegpt(n: int, rate: float | None = None, seed: int = 0) -> list[Request]:
    return sample_requests(sharegpt_like(200, 180, rate=rate), n, seed=seed,
                           vocab_size=ARCH.vocab_size)


def _workload(n: int, seed: int = 0, **spec) -> list[Request]:
    base = {"name": "equivalence",
            "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "min": 4, "max": 2000},
            "output": {"kind": "lognormal", "median": 120, "sigma": 0.8, "min": 2, "max": 1000},
            "arrival": {"process": "inf"}}
    base.update(spec)
    return sample_requests(validate_workload(base, "equivalence"), n, seed=seed,
                           vocab_size=ARCH.vocab_size)


def _prefixed(n: int) -> list[Request]:
    return _workload(n, prefix={"length": 700, "num_prefixes": 5, "share": 0.8},
                     arrival={"process": "poisson", "rate": 40.0})


def _repeated(n: int) -> list[Request]:
    """A few prompts sent again and again (whole-prompt cache hits, last token recomputed)."""
    base = _workload(12, seed=5)
    return [dataclasses.replace(base[i % len(base)], request_id=i, arrival_s=0.05 * i,
                                output_tokens=20 + (7 * i) % 90) for i in range(n)]


def _priorities(n: int) -> list[Request]:
    return _workload(n, priorities=[{"name": "hi", "priority": 0, "share": 0.3},
                                    {"name": "lo", "priority": 5, "share": 0.7}],
                     arrival={"process": "poisson", "rate": 60.0})


def _small_kv(blocks: int, **config) -> dict:
    return {"kv_cache_memory_bytes": blocks * 16 * KV_PER_TOKEN, "max_model_len": 4096,
            **config}


SPEC = SpeculativeConfig("ngram", 4, prompt_lookup_max=4)


def scenarios() -> Iterator[tuple[str, Callable[[], object]]]:
    """(name, thunk returning a SimRun or Prediction), in a fixed order."""
    def sim(setup: SimSetup, requests: list[Request], **kw) -> Callable[[], object]:
        return lambda: simulate(setup, requests, **kw)

    yield "sharegpt-3000-defaults", sim(_setup(), _sharegpt(3000))
    yield "sharegpt-2000-seqs64", sim(_setup(max_num_seqs=64), _sharegpt(2000))
    yield "sharegpt-poisson", sim(_setup(), _sharegpt(1500, rate=30.0, seed=2))
    yield "prefix-groups", sim(_setup(), _prefixed(800))
    yield "prefix-groups-tight-kv", sim(_setup(**_small_kv(900)), _prefixed(600))
    yield "repeated-prompts", sim(_setup(), _repeated(300))
    yield "repeated-prompts-tight-kv", sim(_setup(**_small_kv(300)), _repeated(400))
    yield "kv-oversubscribed", sim(_setup(**_small_kv(400)), _workload(600))
    yield "kv-oversubscribed-no-cache", sim(
        _setup(**_small_kv(400, enable_prefix_caching=False)), _workload(600))
    yield "kv-oversubscribed-0.18", sim(_setup("0.18.0", **_small_kv(400)), _workload(600))
    long_prompts = _workload(300, prompt={"kind": "lognormal", "median": 1500, "sigma": 0.5,
                                          "min": 200, "max": 3000})
    for version in ("0.18.0", "0.19.0"):
        yield f"long-prompts-tight-kv-{version}", sim(
            _setup(version, **_small_kv(700, max_num_batched_tokens=512)), long_prompts)
    yield "kv-oversubscribed-priority", sim(
        _setup(**_small_kv(500, scheduling_policy="priority")), _priorities(600))
    yield "priority", sim(_setup(scheduling_policy="priority", max_num_seqs=32),
                          _priorities(800))
    yield "chunked-prefill-off", sim(_setup(enable_chunked_prefill=False, max_model_len=4096,
                                            max_num_batched_tokens=4096), _workload(800))
    yield "long-prefill-cap", sim(_setup(long_prefill_token_threshold=256,
                                         max_num_batched_tokens=1024), _workload(600))
    spec_setup = dataclasses.replace(_setup(speculative=SPEC), spec_acceptance=0.7)
    yield "speculative", sim(spec_setup, _workload(500), seed=3)
    yield "speculative-tight-kv", sim(
        dataclasses.replace(_setup(speculative=SPEC, **_small_kv(500)), spec_acceptance=0.6),
        _workload(400), seed=4)
    yield "v0", sim(_setup("0.6.3", max_model_len=8192), _workload(800))
    yield "v0-multistep8", sim(_setup("0.6.3", max_model_len=8192, num_scheduler_steps=8),
                               _workload(800))
    yield "v0-tight-kv", sim(_setup("0.6.3", **_small_kv(600)), _workload(500))
    yield "closed-loop", sim(_setup(), _workload(600), max_concurrency=24)
    yield "closed-loop-tight-kv", sim(_setup(**_small_kv(300)), _workload(400),
                                      max_concurrency=64)
    yield "offline", sim(dataclasses.replace(_setup(), offline=True), _sharegpt(1500),
                         warmup=0)
    yield "too-long-rejected", sim(_setup(max_model_len=600), _workload(300))
    yield "trace", sim(_setup(max_num_seqs=128), _sharegpt(1000), trace=True, warmup=2)
    yield "predict-inf", lambda: predict(_setup(), _sharegpt(2000))
    yield "predict-poisson", lambda: predict(_setup(), _sharegpt(800, rate=25.0),
                                             offered_rate=25.0)


def _digest(values: object) -> str:
    return hashlib.sha256(repr(values).encode()).hexdigest()[:16]


def _requests_lines(name: str, requests: list[Request]) -> list[str]:
    return [f"requests {name}: n={len(requests)}"
            f" ids={_digest([tuple(r.prompt_token_ids) for r in requests])}"
            f" out={_digest([r.output_tokens for r in requests])}"
            f" at={_digest([r.arrival_s for r in requests])}"
            f" prio={_digest([(r.priority, r.prefix_group) for r in requests])}"]


def _run_lines(run) -> list[str]:
    lines = [f"status={run.status} cause={run.cause!r}", f"facts={run.facts!r}"]
    for r in run.records:
        lines.append(f"record {r.request_id} sched={r.scheduled_s!r} sent={r.sent_s!r} "
                     f"end={r.end_s!r} in={r.prompt_tokens} out={r.output_tokens} "
                     f"prio={r.priority} group={r.prefix_group} err={r.error!r} "
                     f"wait={r.slot_wait_s!r} n={len(r.chunk_times_s)} "
                     f"times={_digest(r.chunk_times_s)}")
    if run.status == "ok":
        lines.append(f"result={sorted(compute_result(run.records).to_dict().items())!r}")
    if run.trace is not None:
        trace = run.trace
        lines.append(f"trace={_digest((trace.start_s.tolist(), trace.duration_s.tolist()))}"
                     f" shapes={_digest(trace.shapes)}")
    return lines


def dump() -> list[str]:
    lines = []
    lines += _requests_lines("sharegpt", _sharegpt(3000))
    lines += _requests_lines("sharegpt-poisson", _sharegpt(1500, rate=30.0, seed=2))
    lines += _requests_lines("prefixed", _prefixed(800))
    lines += _requests_lines("priorities", _priorities(800))
    for name, thunk in scenarios():
        out = thunk()
        lines.append(f"== {name}")
        if hasattr(out, "intervals"):
            lines.append(f"intervals={sorted(out.intervals.items())!r}")
            lines.append(f"flags={out.flags!r} capacity={out.capacity_rps!r}")
            out = out.run
        lines += _run_lines(out)
        facts = out.facts
        print(f"{name}: " + (f"{facts.steps} steps, {facts.preemptions} preemptions, "
                             f"{facts.prefix_cache_hits} hit tokens" if facts else out.status),
              file=sys.stderr)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", help="dump the results here")
    group.add_argument("--check", help="compare with this dump")
    args = parser.parse_args()
    lines = dump()
    if args.write:
        with open(args.write, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {len(lines)} lines to {args.write}")
        return
    with open(args.check) as f:
        expected = f.read().splitlines()
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(expected, lines, strict=False)) if a != b]
    if len(expected) != len(lines):
        diffs.append((min(len(expected), len(lines)), f"{len(expected)} lines",
                      f"{len(lines)} lines"))
    for i, a, b in diffs[:10]:
        print(f"line {i}:\n  expected {a[:300]}\n  got      {b[:300]}")
    print(f"{len(diffs)} differing lines of {len(expected)}" if diffs
          else f"identical ({len(lines)} lines)")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
