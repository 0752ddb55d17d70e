"""sweetspot's own GPU runs as public cases (P9-P15): vLLM 0.24 on the lent H100 and H200, every
run's files under ``benchmarks/gpu/``. P12-P14 were measured after the constants were fitted
to P9-P11; P14 and P15 were predicted before they ran (P15's closed loops then took part in the
fit of the weights' share and the per-layer time)."""

from __future__ import annotations

from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.workload import WorkloadSpec, validate_workload
from sweetspot.testing.public_cases import Check, PublicCase, Run, sharegpt_like

__all__ = ["own_cases"]


_OWN_H100 = ("sweetspot's own runs: benchmarks/gpu/results-2026-12-07-issue22-h100 (vLLM 0.24.0, "
             "H100 SXM 80GB, Qwen3-14B-shaped dummy weights, sweetspot bench --detailed)")


_OWN_H100_ROUND2 = ("sweetspot's own runs: benchmarks/gpu/results-2026-12-07-issue22-h100-round2 "
                    "(vLLM 0.24.0, H100 SXM 80GB, dummy weights, sweetspot bench --detailed)")


_OWN_H100_ROUND3 = ("sweetspot's own runs: benchmarks/gpu/results-2026-12-07-issue22-round3 "
                    "(vLLM 0.24.0, H100 SXM 80GB, Llama-3.1-8B-shaped dummy weights, sweetspot "
                    "bench --detailed)")


def _p14_runs() -> tuple[Run, ...]:
    """issue22.sh BATCH=3: bursts through the API server (requests, prompt, output, seed,
    measured req/s and median TTFT ms)."""
    return tuple(
        Run(f"random {pin}/{pout} x{n}", _fixed(pin, pout), n,
            (Check("request_throughput", tput), Check("median_ttft_ms", ttft)), seed=seed,
            fresh=False)
        for n, pin, pout, seed, tput, ttft in (
            (150, 128, 4, 11, 218.33, 594.4), (600, 128, 4, 12, 257.32, 1351.3),
            (1200, 128, 4, 13, 259.33, 2814.1), (600, 128, 1, 14, 265.90, 1454.4),
            (600, 128, 64, 15, 121.69, 1810.4), (600, 512, 4, 16, 80.48, 3908.6)))


_OWN_H100_ROUND4 = ("sweetspot's own runs: benchmarks/gpu/results-2026-12-07-issue22-round4 "
                    "(vLLM 0.24.0, H100 SXM 80GB, Llama-3.1-8B-shaped dummy weights, sweetspot "
                    "bench --detailed)")


def _p15_runs() -> tuple[Run, ...]:
    """issue22.sh BATCH=4: small-batch decode at moderate load on the 8B shape, and two runs of
    earlier rounds again on another host (the 128/64 burst of P14, the closed loop of P12)."""
    runs = [Run(f"256/256 closed loop of {conc}", _fixed(256, 256), num,
                (Check("output_throughput", tput), Check("median_tpot_ms", tpot)),
                max_concurrency=conc, seed=seed, fresh=conc == 1)
            for conc, num, seed, tput, tpot in ((1, 6, 21, 153.26, 6.49), (4, 24, 22, 597.16, 6.57),
                                                (16, 64, 23, 2182.92, 6.88))]
    runs += [Run(f"ShareGPT-like Poisson {rate}/s x{n}", _sharegpt_i22(rate), n,
                 (Check("median_tpot_ms", tpot), Check("median_ttft_ms", ttft)), seed=seed,
                 fresh=False)
             for rate, n, seed, tpot, ttft in ((2.0, 120, 24, 6.56, 21.95),
                                               (4.0, 200, 25, 6.72, 23.76))]
    runs += [
        Run("random 128/64 x600 (P14's, another host)", _fixed(128, 64), 600,
            (Check("request_throughput", 102.28), Check("median_ttft_ms", 1660.57)), seed=26,
            fresh=False),
        Run("20000/200 closed loop of 4 (P12's, another host)", _fixed(20000, 200), 24,
            (Check("request_throughput", 0.9170), Check("median_ttft_ms", 1297.81),
             Check("median_tpot_ms", 15.84)), max_concurrency=4, seed=27, fresh=False),
    ]
    return tuple(runs)


def _sharegpt_i22(rate: float) -> WorkloadSpec:
    """benchmarks/gpu/i22/sharegpt-228-202.json (P7's means) at ``rate`` req/s, as sent."""
    return validate_workload({
        "name": "sharegpt-228-202",
        "prompt": {"kind": "lognormal", "median": 147.58, "sigma": 1.0, "min": 4, "max": 1024},
        "output": {"kind": "lognormal", "median": 143.58, "sigma": 0.85, "min": 4, "max": 1024},
        "arrival": {"process": "poisson", "rate": rate},
    }, "sharegpt-228-202")


def _fixed(input_len: int, output_len: int, *, shared: int = 0) -> WorkloadSpec:
    """Fixed lengths; the first ``shared`` tokens the same in every prompt."""
    return validate_workload({
        "name": f"fixed-{input_len}-{output_len}-shared-{shared}",
        "prompt": {"kind": "fixed", "value": input_len - shared},
        "output": {"kind": "fixed", "value": output_len},
        "prefix": {"length": shared, "num_prefixes": 1, "share": 1.0 if shared else 0.0},
        "arrival": {"process": "inf"},
    }, "fixed")


def _p9_runs() -> tuple[Run, ...]:
    """issue22.sh's server A runs (see P9's source): prefill by prompt length, decode by
    batch, saturated bursts, prefix sharing, Poisson load and a long-prompt closed loop."""
    prefill_ttft = {128: 19.93, 512: 30.07, 1024: 53.54, 2048: 99.04, 4096: 193.90,
                    8192: 389.18, 16384: 882.01, 24576: 1445.13}
    runs = [Run(f"one {n}-token prompt at a time", _fixed(n, 1), 4,
                (Check("median_ttft_ms", ttft),), max_concurrency=1, warmup=0, seed=n,
                fresh=False)
            for n, ttft in prefill_ttft.items()]
    for conc, num, tput, tpot in ((1, 6, 89.73, 11.10), (8, 48, 684.80, 11.37),
                                  (32, 128, 2457.96, 12.11)):
        runs.append(Run(f"256/256 closed loop of {conc}", _fixed(256, 256), num,
                        (Check("output_throughput", tput), Check("median_tpot_ms", tpot)),
                        max_concurrency=conc))
    runs += [
        Run("ShareGPT x500 rate inf, fresh server", sharegpt_like(228, 202), 500,
            (Check("request_throughput", 24.08), Check("median_tpot_ms", 37.67),
             Check("median_ttft_ms", 3205.35)), warmup=0),
        Run("random 2000/100 x150", _fixed(2000, 100), 150,
            (Check("request_throughput", 8.845), Check("median_ttft_ms", 6923.5))),
        Run("random 4000/200 x60", _fixed(4000, 200), 60,
            (Check("request_throughput", 3.889), Check("median_ttft_ms", 5589.9))),
        Run("random 128/4 x600", _fixed(128, 4), 600, (Check("request_throughput", 147.4),)),
        Run("ShareGPT Poisson 8/s x240", sharegpt_like(228, 202, rate=8.0), 240,
            (Check("median_tpot_ms", 11.99), Check("median_ttft_ms", 40.61)), seed=7),
        Run("20000/200 closed loop of 16", _fixed(20000, 200), 48,
            (Check("request_throughput", 0.6925), Check("median_ttft_ms", 5380.7)),
            max_concurrency=16),
    ]
    for shared, tput in ((0, 10.00), (1000, 18.28), (1800, 49.49)):
        runs.append(Run(f"2000/64 x200, {shared} shared", _fixed(2000, 64, shared=shared), 200,
                        (Check("request_throughput", tput),), seed=shared))
    return tuple(runs)


def own_cases() -> tuple[PublicCase, ...]:
    """P9-P15: sweetspot's own runs on the lent GPUs (P12-P14 measured after the fits)."""
    return (
        PublicCase("P9", "h100", "qwen3-14b", "0.24.0", ServingConfig(max_model_len=32768),
                   _p9_runs(), vocab_size=32000, source=_OWN_H100,
                   notes=("server A of issue22.sh: vLLM 0.24's defaults (CUDA graphs, "
                          "torch.compile, async scheduling, chunked prefill, prefix caching)",
                          "a02 (ShareGPT, warm) left out: its prompts repeated a01's (same "
                          "seed), an 80 % prefix-cache hit")),
        PublicCase("P10", "h100", "qwen3-14b", "0.24.0",
                   ServingConfig(max_model_len=4096, kv_cache_memory_bytes=8 << 30), (
            Run("512/256 x500 rate inf (KV over-subscribed)", _fixed(512, 256), 500,
                (Check("request_throughput", 12.49), Check("median_tpot_ms", 20.30))),
            Run("512/256 closed loop of 64", _fixed(512, 256), 200,
                (Check("request_throughput", 11.17), Check("median_tpot_ms", 16.25)),
                max_concurrency=64),
        ), vocab_size=32000, source=_OWN_H100,
            notes=("server B of issue22.sh: an 8 GiB KV cache",)),
        PublicCase("P11", "h200", "qwen2.5-7b", "0.24.0", ServingConfig(max_model_len=4096), tuple(
            Run(f"512/256 x512 rate inf, {n} sequences", _fixed(512, 256), 512, checks,
                seed=n, config=ServingConfig(max_model_len=4096, max_num_seqs=n))
            for n, checks in (
                (16, (Check("output_throughput", 2817.87), Check("median_tpot_ms", 5.07))),
                (256, (Check("output_throughput", 10164.97), Check("median_tpot_ms", 20.94),
                       Check("median_itl_ms", 15.94), Check("median_ttft_ms", 4681.83))))),
            source="sweetspot's own runs: benchmarks/gpu/results-2026-12-02 (vLLM 0.24.0, "
                   "H200 141GB, Qwen2.5-7B-shaped dummy weights, run_trials.sh)"),
        *_held_out_cases(),
    )


def _held_out_cases() -> tuple[PublicCase, ...]:
    """P12-P15: our runs measured after P9-P11 fixed the constants (P14 after the intake change,
    P15 before the per-layer time; both predicted before they ran)."""
    return (
        PublicCase("P12", "h100", "llama-3.1-8b", "0.24.0", ServingConfig(max_model_len=32768), (
            Run("20000/200 closed loop of 4", _fixed(20000, 200), 24,
                (Check("request_throughput", 0.9312), Check("median_ttft_ms", 1165.74),
                 Check("median_tpot_ms", 16.16)), max_concurrency=4),
            Run("20000/200 closed loop of 8", _fixed(20000, 200), 32,
                (Check("request_throughput", 1.081), Check("median_ttft_ms", 1279.3),
                 Check("median_tpot_ms", 31.29)), max_concurrency=8, fresh=False),
            Run("ShareGPT x600 rate inf", sharegpt_like(228, 202), 600,
                (Check("request_throughput", 42.19), Check("median_tpot_ms", 34.03)), seed=3,
                fresh=False),
            Run("random 128/4 x600", _fixed(128, 4), 600, (Check("request_throughput", 251.5),),
                seed=4, fresh=False),
        ), vocab_size=32000, source=_OWN_H100_ROUND2,
            notes=("server C of issue22.sh BATCH=2: a Llama-3.1-8B-shaped Qwen2 model",
                   "measured after P9-P11 fixed the constants: a held-out check")),
        PublicCase("P13", "h100", "qwen3-14b", "0.24.0", ServingConfig(max_model_len=32768), tuple(
            run for budget, tput, ttft, prefill in ((2048, 3.66, 6069.81, 407.22),
                                                    (16384, 3.846, 6049.37, 394.93))
            for run in (
                Run(f"random 4000/200 x60, {budget}-token steps", _fixed(4000, 200), 60,
                    (Check("request_throughput", tput), Check("median_ttft_ms", ttft)), seed=5,
                    config=ServingConfig(max_model_len=32768, max_num_batched_tokens=budget)),
                Run(f"one 8192-token prompt, {budget}-token steps", _fixed(8192, 1), 3,
                    (Check("median_ttft_ms", prefill),), max_concurrency=1, warmup=0,
                    seed=8192, fresh=False,
                    config=ServingConfig(max_model_len=32768, max_num_batched_tokens=budget)))),
            vocab_size=32000, source=_OWN_H100_ROUND2,
            notes=("servers D2048 and D16384 of issue22.sh BATCH=2",
                   "measured after P9-P11 fixed the constants: a held-out check")),
        PublicCase("P14", "h100", "llama-3.1-8b", "0.24.0", ServingConfig(max_model_len=32768),
                   _p14_runs(), vocab_size=32000, source=_OWN_H100_ROUND3,
                   notes=("server C of issue22.sh BATCH=3 (its first run e01 on the fresh "
                          "server, after the bench's warm-up request)",
                          "predicted before the run (predictions-h100.json): a held-out check "
                          "of the API server's round-robin intake")),
        PublicCase("P15", "h100", "llama-3.1-8b", "0.24.0", ServingConfig(max_model_len=32768),
                   _p15_runs(), vocab_size=32000, source=_OWN_H100_ROUND4,
                   notes=("server C of issue22.sh BATCH=4, predicted before the run "
                          "(predictions-h100.json: decode TPOT 5-6 % fast, as P8's)",
                          "the closed loops of 1, 4 and 16 then fitted the weights' share and "
                          "the per-layer time with P9's and P8's; the Poisson runs were not",
                          "the 128/64 burst ran 16 % slower than on round 3's host: the host's "
                          "CPU paces a 600-sequence decode (ITL 53 against 38 ms; round 5's step "
                          "log puts that pace in the API process)")),
    )
