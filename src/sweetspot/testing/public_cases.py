"""The published vLLM measurements of ``public-cases.md`` (P1-P8) and our own GPU runs (P9-P15,
``own_cases``), encoded for the simulator.

Each case: GPU, model, vLLM version, launch configuration (the version's defaults where the
source states none, spelled out for the pre-V1 releases whose defaults differ from V1's), and
runs (workload, request count, rate) with the measured values. ``run_case`` simulates every run
and pairs each prediction with its measurement; the tests hold the errors to the issue's bounds
and ``benchmarks/fidelity.py`` writes them to RESULTS.md.

Workloads: vLLM's ShareGPT sampling is not shipped here, so "ShareGPT" is a log-normal stand-in
with the published means (P1: 202 in / 179 out with Llama-3's tokenizer; where a source gives
output tokens and requests, its own mean output) truncated as vLLM's sampler filters
(prompt 4-1024 tokens, output 4 or more, prompt + output 2048 at most). Random datasets are
fixed lengths, as ``vllm bench serve --dataset-name random`` with its default range ratio 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.version import OLDEST_VLLM_VERSION
from sweetspot.spec.workload import WorkloadSpec, validate_workload

__all__ = ["CASES", "Check", "PublicCase", "Run", "run_case", "sharegpt_like"]

THROUGHPUT_KEYS = ("request_throughput", "output_throughput")
SHAREGPT_SIGMA_IN, SHAREGPT_SIGMA_OUT = 1.0, 0.85  # spread of ShareGPT's first turns


@cache
def _median_for_mean(mean: float, sigma: float, low: int, high: int) -> float:
    """The log-normal median whose truncated mean is ``mean`` (bisection on a fixed sample)."""
    z = np.random.default_rng(0).standard_normal(200_000)
    lo, hi = 1.0, mean * 4
    for _ in range(60):
        mid = (lo + hi) / 2
        x = np.clip(np.round(mid * np.exp(sigma * z)), low, high)
        lo, hi = (mid, hi) if x.mean() < mean else (lo, mid)
    return (lo + hi) / 2


def sharegpt_like(mean_in: float, mean_out: float, *, rate: float | None = None) -> WorkloadSpec:
    """A ShareGPT stand-in with the given means (see the module docstring)."""
    def dist(mean: float, sigma: float, high: int) -> dict:
        return {"kind": "lognormal", "median": _median_for_mean(mean, sigma, 4, high),
                "sigma": sigma, "min": 4, "max": high}

    arrival = {"process": "inf"} if rate is None else {"process": "poisson", "rate": rate}
    return validate_workload({
        "name": f"sharegpt-like-{mean_in:g}-{mean_out:g}",
        "prompt": dist(mean_in, SHAREGPT_SIGMA_IN, 1024),
        "output": dist(mean_out, SHAREGPT_SIGMA_OUT, 1024),
        "arrival": arrival,
    }, "sharegpt_like")


def random_fixed(input_len: int, output_len: int) -> WorkloadSpec:
    return validate_workload({
        "name": f"random-{input_len}-{output_len}",
        "prompt": {"kind": "fixed", "value": input_len},
        "output": {"kind": "fixed", "value": output_len},
        "arrival": {"process": "inf"},
    }, "random_fixed")


@dataclass(frozen=True, slots=True)
class Check:
    metric: str  # a BenchResult key, e.g. "output_throughput", "median_tpot_ms"
    measured: float

    @property
    def kind(self) -> str:
        return "throughput" if self.metric in THROUGHPUT_KEYS else "latency"


@dataclass(frozen=True, slots=True)
class Run:
    label: str
    workload: WorkloadSpec
    num_requests: int
    checks: tuple[Check, ...]
    max_concurrency: int | None = None
    warmup: int = 1  # requests run before the clock starts (``sweetspot bench --warmup``)
    seed: int | None = None  # the run's sampling seed, where it was not the case's
    fresh: bool = True  # the first run on a freshly started server (else it served others)
    config: ServingConfig | None = None  # the run's own launch options, where not the case's


@dataclass(frozen=True, slots=True)
class PublicCase:
    case_id: str
    gpu: str
    model: str
    version: str  # the measured release ("0.6.0"); the simulator's tables start at 0.6.0
    config: ServingConfig
    runs: tuple[Run, ...]
    engine: str = "v1"  # "v0" for the pre-V1 releases
    endpoint: str = "completions"  # the API the benchmark called ("chat": vllm bench's openai-chat)
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    vocab_size: int | None = None  # token ids the client drew from, where not the model's


@dataclass(frozen=True, slots=True)
class Outcome:
    case_id: str
    run: str
    metric: str
    kind: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted / self.measured - 1.0

    @property
    def factor(self) -> float:
        """How many times off, >= 1 whichever side."""
        ratio = self.predicted / self.measured
        return max(ratio, 1 / ratio) if ratio > 0 else float("inf")


def _v0(max_model_len: int, **extra) -> ServingConfig:
    """vLLM 0.5/0.6 defaults: 256 sequences, whole prompts of up to max(len, 2048) tokens per
    step, no prefix caching, utilisation 0.9."""
    values = {"max_num_seqs": 256, "max_model_len": max_model_len,
              "max_num_batched_tokens": max(max_model_len, 2048),
              "enable_chunked_prefill": False, "enable_prefix_caching": False,
              "gpu_memory_utilization": 0.9, "block_size": 16}
    values.update(extra)
    return ServingConfig(**values)


def _p6_runs() -> tuple[Run, ...]:
    measured = {1: 85, 10: 715, 20: 1339, 30: 1831, 50: 2338, 75: 2132, 100: 2125, 200: 2058,
                500: 2171, 1000: 2184}
    runs = []
    for n, tput in measured.items():
        checks = [Check("output_throughput", tput)]
        if n == 1:
            checks += [Check("mean_tpot_ms", 11.8), Check("mean_ttft_ms", 36.0)]
        if n == 1000:
            checks.append(Check("mean_tpot_ms", 32.4))
        runs.append(Run(f"N={n}", random_fixed(1024, 1024), n, tuple(checks)))
    return tuple(runs)


def _p8_runs() -> tuple[Run, ...]:
    return tuple(
        Run(f"input {n}", random_fixed(n, 128), 2,
            (Check("median_itl_ms", 6.44 + 4.37e-5 * n),), max_concurrency=1)
        for n in (256, 8192, 32768, 125000)
    )


def _perf_update_blog(case_id: str, gpu: str, req_s: float, tpot_2_ms: float,
                      tpot_32_ms: float) -> PublicCase:
    """P1/P2: Llama-3-8B, 0.6.0 multi-step 10, ShareGPT 500 prompts at rate inf, 2 and 32/s."""
    runs = (Run("rate inf", sharegpt_like(202, 179), 500,
                (Check("request_throughput", req_s),)),
            *(Run(f"{rate} req/s", sharegpt_like(202, 179, rate=rate), 500,
                  (Check("median_tpot_ms", tpot),))
              for rate, tpot in ((2, tpot_2_ms), (32, tpot_32_ms))))
    return PublicCase(case_id, gpu, "llama-3-8b", "0.6.0", _v0(8192, num_scheduler_steps=10),
                      runs, engine="v0", source="vLLM blog 'perf update' (2024-09-05)")


def _cases() -> tuple[PublicCase, ...]:
    # Our own runs use this module's types: imported here, once those exist (CASES is built
    # at the end of this module).
    from sweetspot.testing.own_cases import own_cases

    sharegpt = sharegpt_like(202, 179)
    lambda_ = "LambdaLabsML/vllm-benchmark"
    return (
        _perf_update_blog("P1", "h100", 37.0, 8.0, 13.5),
        _perf_update_blog("P2", "a100-80gb", 19.0, 13.0, 40.0),
        PublicCase("P3", "h100", "llama-3.1-8b", "0.6.0",
                   _v0(2048, num_scheduler_steps=10), (
            Run("rate inf", sharegpt, 5000,
                (Check("output_throughput", 8088.0), Check("median_tpot_ms", 25.6),
                 Check("median_itl_ms", 243.8))),
        ), engine="v0", source=f"{lambda_} benchmark_v0.md",
            notes=("ITL is a multi-step run's 10 tokens in one message",)),
        PublicCase("P4", "h100", "mistral-7b", "0.5.4", _v0(2000, gpu_memory_utilization=0.95), (
            Run("rate inf", sharegpt_like(253, 224), 320,
                (Check("output_throughput", 3281.0), Check("request_throughput", 14.62),
                 Check("median_itl_ms", 27.2), Check("mean_ttft_ms", 1290.0))),
        ), engine="v0", source=f"{lambda_} results/prompt_320",
            notes=("mean output 224 = 3281 / 14.62 tok per request; input scaled alike",)),
        PublicCase("P5", "a100-80gb", "mistral-7b", "0.5.4",
                   _v0(2000, gpu_memory_utilization=0.95), (
            Run("rate inf", sharegpt_like(253, 224), 320,
                (Check("output_throughput", 1591.0), Check("median_itl_ms", 56.5))),
        ), engine="v0", source=lambda_),
        PublicCase("P6", "a100-80gb", "qwen2-7b", "0.10.1.1",
                   ServingConfig(gpu_memory_utilization=0.25, max_model_len=16384,
                                 max_num_batched_tokens=2048, enable_prefix_caching=True),
                   _p6_runs(), source="dennislee22/vLLM-benchmarking Test 4"),
        PublicCase("P7", "h100", "qwen3-14b", "0.11.0", ServingConfig(), (
            Run("ShareGPT 1000", sharegpt_like(228, 202), 1000,
                (Check("request_throughput", 15.74), Check("output_throughput", 3174.0),
                 Check("mean_ttft_ms", 22141.0))),
            Run("random 2000/100", random_fixed(2000, 100), 500,
                (Check("request_throughput", 5.06), Check("mean_ttft_ms", 50716.0))),
            Run("random 4000/200", random_fixed(4000, 200), 500,
                (Check("request_throughput", 2.20), Check("mean_ttft_ms", 112717.0))),
            Run("random 128/4", random_fixed(128, 4), 1000,
                (Check("request_throughput", 44.0), Check("mean_ttft_ms", 18283.0))),
        ), endpoint="chat", source="gpustack performance-lab qwen3-14b/h100.md",
            notes=("ShareGPT mean output 202 = 3174 / 15.74",
                   "chat endpoint (vllm bench serve --backend openai-chat)",
                   "TPOT/ITL not checked: 597/581 ms for 128/4 are the API loop interleaving "
                   "intakes with streaming, which the simulator does not mirror")),
        PublicCase("P8", "h100", "llama-3.1-8b", "0.19.1", ServingConfig(), _p8_runs(),
                   source="vLLM blog 'fp8 KV cache' (2026-04-22)"),
        *own_cases(),
    )


CASES = _cases()


def simulator_version(version: str) -> Version:
    """The release whose tables the simulator uses: the measured one, or the oldest it knows
    (0.6.0) for older ones."""
    return max(Version(version), OLDEST_VLLM_VERSION)


def run_case(case: PublicCase, *, seed: int = 0) -> list[Outcome]:
    hardware = load_hardware(case.gpu)
    resolved = load_model(case.model)
    quant = resolved.quantization or resolved.arch.default_quantization()
    setup = SimSetup(hardware, resolved.arch, quant, case.config,
                     simulator_version(case.version), engine=case.engine,
                     endpoint=case.endpoint)
    outcomes = []
    run_vocab = case.vocab_size
    for run in case.runs:
        requests = sample_requests(run.workload, run.num_requests,
                                   seed=seed if run.seed is None else run.seed,
                                   vocab_size=run_vocab or resolved.arch.vocab_size)
        run_setup = setup if run.config is None else dataclasses.replace(setup, config=run.config)
        sim = simulate(run_setup, requests, max_concurrency=run.max_concurrency,
                       warmup=run.warmup, fresh=run.fresh)
        if sim.status != "ok":
            raise AssertionError(f"{case.case_id} {run.label}: {sim.status}: {sim.cause}")
        result = compute_result(sim.records).to_dict()
        outcomes += [Outcome(case.case_id, run.label, c.metric, c.kind, c.measured,
                             float(result[c.metric])) for c in run.checks]
    return outcomes
