"""Step-time models: how long one engine step takes for the batch the scheduler formed.

A step is one forward pass of the model over every token scheduled in it (decodes, prefill chunks,
speculative verifications) plus the CPU's work around it (scheduling, input preparation,
sampling, output processing). Every model here is a pure function of the hardware, the model and
the step's ``StepShape``; fitting coefficients from measurements lives in ``fit.py``, files in
``calibration.py``.

Two models behind one interface (``StepTimeModel``):

- ``RooflineModel`` derives the time from the catalog: GPU time = a smooth max(compute, memory)
  + fixed costs, where compute counts linear-layer FLOPs of the step's tokens and attention
  FLOPs over their contexts at an achievable fraction of the tensor-core peak, and memory
  counts the weights read once per step plus the KV cache the attention reads, at achievable
  fractions of the bandwidth. Tensor parallelism splits both and adds two all-reduces per layer.
- ``LinearStepModel`` is the calibrated form: time = c0 + c_seq x sequences + c_tok x tokens +
  c_ctx x attended context, coefficients fitted by least squares (``fit.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from packaging.version import Version

from sweetspot.engine.releases import FAST_KERNELS_SINCE
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.model import ModelArch
from sweetspot.spec.quant import Quantization

__all__ = [
    "LEGACY_ROOFLINE",
    "ROOFLINE",
    "LinearStepModel",
    "RooflineConstants",
    "RooflineModel",
    "ScaledSteps",
    "StepShape",
    "StepTime",
    "StepTimeModel",
    "roofline_constants",
]


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one engine step computes; counts are summed over the step's requests."""

    num_seqs: int  # requests scheduled in the step
    num_decode_tokens: int  # one per decoding request, 1 + k with speculation (verification)
    num_prefill_tokens: int  # prompt (or recompute) tokens of the step's prefill chunks
    num_sampled: int  # sequences that sample a token (the LM head runs only for them)
    decode_context: int  # KV tokens the decode queries attend to (sum of their positions)
    prefill_context: int  # KV tokens the prefill chunks read (sum of chunk end positions)
    prefill_pairs: float  # query x key pairs of the prefill chunks (causal), for attention FLOPs
    draft_tokens: int = 0  # tokens a draft model runs over in the step (all its passes)
    draft_context: int = 0  # KV tokens the draft model's queries attend to
    draft_passes: int = 0  # sequential draft forward passes (k for a draft model)

    @property
    def num_tokens(self) -> int:
        return self.num_decode_tokens + self.num_prefill_tokens

    @property
    def attended(self) -> float:
        """Query-key pairs of the step: decodes attend to their contexts, prefills causally."""
        return self.decode_context + self.prefill_pairs


@dataclass(frozen=True, slots=True)
class StepTime:
    duration_s: float
    compute_bound: bool | None  # None where the model cannot tell (calibrated models)


class StepTimeModel(Protocol):
    """The simulator's cost seam: a step's wall time, and the front end's per-request latency."""

    request_latency_s: float  # API server + network, both directions, per request
    request_intake_s: float  # serial API-server work per request before the engine sees it

    def step_time(self, shape: StepShape, *, async_scheduling: bool,
                  cpu_scheduled: bool = True) -> StepTime: ...


@dataclass(frozen=True, slots=True)
class RooflineConstants:
    """Achievable fractions of the datasheet peaks and fixed costs. Sources: hardware-models.md
    (decode weight streaming 50-75 % of peak bandwidth, KV reads ~90 %, prefill MFU 0.38-0.45 in
    other calibrations; an H200 reaches ~80 % of its bf16 peak on large matmuls), fitted within
    those ranges to public-cases.md P6/P8 (single-stream decode) and P3/P7 (saturated ShareGPT)."""

    weight_bandwidth: float = 0.72  # weight streaming, fraction of peak bandwidth
    kv_bandwidth: float = 0.80  # paged KV reads (gathers of 16-token blocks)
    linear_mfu: float = 0.45  # fraction of tensor-core peak the model's GEMMs reach
    attention_mfu: float = 0.40  # FlashAttention fraction of peak (softmax, masking)
    overlap_norm: float = 2.0  # p of the smooth max(compute, memory); larger = sharper
    weight_only_dequant: float = 0.80  # W4A16 kernels (Marlin) vs 16-bit at compute-bound sizes
    # Fixed GPU time per step and layer with CUDA graphs (kernel tails, norms, rotary, sampling).
    per_layer_s: float = 9e-6
    # Without CUDA graphs every kernel is launched from Python: ~10 launches per layer.
    eager_per_layer_s: float = 90e-6
    # CPU work per step in vLLM V1: scheduling, input tensors, output processing.
    cpu_step_s: float = 1.6e-3
    cpu_per_seq_s: float = 25e-6
    # The pre-V1 engine prepared inputs and processed outputs (detokenisation included) per
    # sequence group in Python, synchronously: the overhead multi-step scheduling amortised.
    v0_cpu_step_s: float = 3e-3
    v0_cpu_per_seq_s: float = 60e-6
    # Per all-reduce latency (custom all-reduce / NCCL LL on NVLink) and its share of bandwidth.
    allreduce_latency_s: float = 8e-6
    allreduce_bandwidth: float = 0.7
    # API server, both directions: HTTP, detokenisation and SSE of the response, the hops
    # between the API and engine processes (P6's one-request TTFT, 36 ms on vLLM 0.10).
    request_latency_s: float = 20e-3
    # The part of it the API process does serially per request (HTTP parsing, validation,
    # request setup; a chat request adds its template, ``frontend.CHAT_INTAKE_S``): it queues
    # requests that arrive together, and their outputs wait behind it (see ``frontend``).
    request_intake_s: float = 2e-3
    # Draft-free speculation proposes on the CPU (ngram lookup per sequence).
    ngram_per_seq_s: float = 15e-6
    # A fresh server's first step JIT-compiles what its start-up did not (vLLM 0.24 logs
    # "Triton kernel JIT compilation during inference: _compute_slot_mapping_kernel" at its first
    # request); a run with a warm-up request pays it there. 0: not measured for the release.
    fresh_start_s: float = 0.0


# Releases before FAST_KERNELS_SINCE: the fractions fitted to the public 0.5-0.11 runs.
LEGACY_ROOFLINE = RooflineConstants()
# From FAST_KERNELS_SINCE: measured on an H100 with vLLM 0.24 (benchmarks/gpu/, 2026-12-07).
# Kernels alone (kernels.py, PyTorch): a layer's four bf16 GEMMs at 0.66-0.72 of the peak from
# 768 tokens up, weights streamed at 0.80-0.84 of HBM bandwidth below 64 tokens, causal
# attention (cuDNN / FlashAttention 3 class) at 0.56-0.62 from 8K tokens. Whole steps of the
# served model (Qwen3-14B shape, one prompt of 128-24,576 tokens, decode at 1-32 sequences)
# fit GEMMs at 0.65 (norms, rotary and activations ride on them), attention at 0.60. Decode at
# 1-32 sequences of that model and of a Llama-3.1-8B shape (round 4: TPOT 6.49 ms at one
# sequence, as the vLLM blog's 6.45 ms, P8) fit the weights streamed at 0.88 of HBM bandwidth
# beside 30 us a layer (kernel boundaries, where the memory idles: ~3 us each of a layer's ~10
# kernels), which no share alone fits (14B: 0.82, 8B: 0.78). The front end's round trip 6 ms
# (a 128-token prompt's TTFT is 19.9 ms on the 14B host, a 256-token one 14.6 ms on the 8B
# host of round 4). The CPU's 55 us a sequence is the H200 runs' (results-2026-12-02: 256
# sequences decode CPU-bound; a 600-sequence decode on round 3's H100 host: ~61 us, round 4's
# ~85 us: the host's CPU sets it, and round 5's step log puts that pace in the API process's
# outputs, not the engine: RESULTS.md, "round 5").
# A fresh server's first step: the first tokens of a 500-request burst with no warm-up came at
# 0.82 s, of the same burst on the warm server at 0.18 s (both a ~0.33 s step of 8,192 tokens).
# The API server's intake, 1 ms a request: every burst of 150-600 requests (both H100 hosts)
# reached the engine 0.5-1.0 s after it was sent, 0.8-1.3 ms a request (``frontend``).
ROOFLINE = dataclasses.replace(
    LEGACY_ROOFLINE, linear_mfu=0.65, attention_mfu=0.60, weight_bandwidth=0.88,
    per_layer_s=30e-6,
    cpu_per_seq_s=55e-6, request_latency_s=6e-3, request_intake_s=1e-3, fresh_start_s=0.6)
# The share of its HBM bandwidth the H100 streams weights at with those kernels: what a catalog
# GPU's own measured share (``Hardware.weight_streaming``, the H200's 0.79) is relative to.
REFERENCE_STREAMING = ROOFLINE.weight_bandwidth


def roofline_constants(version: Version) -> RooflineConstants:
    """The constants of ``version``'s kernels (``releases.FAST_KERNELS_SINCE``)."""
    return ROOFLINE if version >= FAST_KERNELS_SINCE else LEGACY_ROOFLINE


class RooflineModel:
    """Step time from the catalog's peaks, see the module docstring."""

    def __init__(
        self,
        hardware: Hardware,
        arch: ModelArch,
        quant: Quantization,
        *,
        tensor_parallel_size: int = 1,
        kv_bytes_per_token: int | None = None,
        enforce_eager: bool = False,
        draft: ModelArch | None = None,
        cpu_drafting: bool = False,
        v0: bool = False,
        constants: RooflineConstants = ROOFLINE,
    ) -> None:
        self.hardware, self.arch, self.quant = hardware, arch, quant
        self.tp = tensor_parallel_size
        self.c = constants
        self.request_latency_s = constants.request_latency_s
        self.request_intake_s = constants.request_intake_s
        self.enforce_eager = enforce_eager
        self.cpu_drafting = cpu_drafting
        self._cpu_step = constants.v0_cpu_step_s if v0 else constants.cpu_step_s
        self._cpu_per_seq = constants.v0_cpu_per_seq_s if v0 else constants.cpu_per_seq_s
        counts = arch.param_counts()
        lm_head = arch.vocab_size * arch.hidden_size
        self._linear_params = counts.linear_active  # per token
        self._lm_head_params = lm_head
        self._weight_bytes = arch.weight_bytes(quant) / self.tp
        self._expert_bytes = 0.0
        if arch.is_moe:
            expert_params = arch.num_layers * arch.num_experts * 3 * arch.hidden_size * (
                arch.moe_intermediate_size)
            self._expert_bytes = expert_params * quant.bits_per_weight / 8 / self.tp
        self._kv_bytes = (kv_bytes_per_token if kv_bytes_per_token is not None
                          else arch.kv_bytes_per_token("auto", self.tp))
        self._peak = self._linear_peak(hardware, quant)
        streaming = constants.weight_bandwidth
        if hardware.weight_streaming is not None:
            # The same kernels reach a smaller share of a faster memory (the SMs' loads in
            # flight, not the HBM, limit a GEMV): a GPU measured at 0.79 where the H100 reaches
            # 0.88 streams at 0.79 / 0.88 of the share a release's kernels reach on the H100.
            streaming *= hardware.weight_streaming / REFERENCE_STREAMING
        self._weight_bw = hardware.bandwidth_bytes_per_s * streaming
        self._draft = None
        if draft is not None:
            self._draft = RooflineModel(hardware, draft, draft.default_quantization(),
                                        tensor_parallel_size=self.tp, enforce_eager=enforce_eager,
                                        constants=constants)

    def _linear_peak(self, hardware: Hardware, quant: Quantization) -> float:
        c = self.c
        if quant.compute == "fp8" and hardware.fp8_flops:
            return hardware.fp8_flops * c.linear_mfu
        if quant.compute == "int8" and hardware.int8_ops:
            return hardware.int8_ops * c.linear_mfu
        peak = hardware.bf16_flops * c.linear_mfu
        return peak * c.weight_only_dequant if quant.is_weight_only else peak

    def _weights_read(self, num_tokens: int) -> float:
        """Weight bytes one step streams: all of a dense model; for MoE, the experts that at least
        one of the step's tokens routes to (uniform routing)."""
        if not self.arch.is_moe or num_tokens <= 0:
            return self._weight_bytes
        e, k = self.arch.num_experts, self.arch.num_experts_per_tok
        touched = 1.0 - (1.0 - k / e) ** num_tokens
        return self._weight_bytes - self._expert_bytes * (1.0 - touched)

    def gpu_time(self, shape: StepShape) -> tuple[float, bool]:
        """(seconds on the GPU, whether compute dominated) for the target model's forward."""
        c, hw, arch = self.c, self.hardware, self.arch
        tokens = shape.num_tokens
        linear = 2.0 * (self._linear_params * tokens + self._lm_head_params * shape.num_sampled)
        attention = 4.0 * arch.num_layers * arch.q_size * shape.attended
        compute = (linear / self._peak
                   + attention / (hw.bf16_flops * c.attention_mfu)) / self.tp
        kv_tokens = shape.decode_context + shape.prefill_context
        memory = (self._weights_read(tokens) / self._weight_bw
                  + kv_tokens * self._kv_bytes / (hw.bandwidth_bytes_per_s * c.kv_bandwidth))
        fixed = arch.num_layers * (c.eager_per_layer_s if self.enforce_eager else c.per_layer_s)
        comm = 0.0
        if self.tp > 1:
            # Two all-reduces per layer (after attention and after the MLP), ring algorithm.
            message = tokens * arch.hidden_size * 2
            ring = 2 * (self.tp - 1) / self.tp * message / (
                hw.interconnect_bytes_per_s * c.allreduce_bandwidth)
            comm = 2 * arch.num_layers * (c.allreduce_latency_s + ring)
        # Near the ridge point neither pipe runs at its peak: compute and memory overlap
        # imperfectly, so the time is a smooth maximum (a p-norm) rather than max().
        p = c.overlap_norm
        busy = (compute**p + memory**p) ** (1.0 / p)
        return busy + fixed + comm, compute >= memory

    def step_time(self, shape: StepShape, *, async_scheduling: bool,
                  cpu_scheduled: bool = True) -> StepTime:
        gpu, compute_bound = self.gpu_time(shape)
        if self._draft is not None and shape.draft_passes:
            # A draft model runs its passes one after another: each over every drafting sequence.
            per_pass = max(1, shape.draft_tokens // shape.draft_passes)
            draft_shape = StepShape(
                num_seqs=shape.num_seqs, num_decode_tokens=per_pass, num_prefill_tokens=0,
                num_sampled=per_pass, decode_context=shape.draft_context // shape.draft_passes,
                prefill_context=0, prefill_pairs=0.0)
            gpu += shape.draft_passes * self._draft.gpu_time(draft_shape)[0]
        cpu = self._cpu_step + self._cpu_per_seq * shape.num_seqs
        if not cpu_scheduled:  # inside a V0 multi-step run: no scheduling, no output handling
            cpu = 0.0
        if self.cpu_drafting:
            cpu += self.c.ngram_per_seq_s * shape.num_seqs
        duration = max(gpu, cpu) if async_scheduling else gpu + cpu
        return StepTime(duration, compute_bound)


# Names of LinearStepModel's features, in coefficient order; ``features`` computes them.
LINEAR_FEATURES = ("step", "seqs", "tokens", "attended_k")


def features(shape: StepShape) -> tuple[float, float, float, float]:
    """The calibrated model's regressors for one step (attended query-key pairs in thousands)."""
    return (1.0, float(shape.num_seqs), float(shape.num_tokens), shape.attended / 1000.0)


@dataclass(frozen=True, slots=True)
class LinearStepModel:
    """A calibrated step time: coefficients (seconds per feature) fitted from measurements of one
    hardware + model + vLLM version. Async scheduling is already inside the measured times."""

    coefficients: tuple[float, ...]  # in LINEAR_FEATURES order
    request_latency_s: float = 0.0
    request_intake_s: float = 0.0  # inside the fitted latency

    def step_time(self, shape: StepShape, *, async_scheduling: bool,
                  cpu_scheduled: bool = True) -> StepTime:
        c0, c_seq, c_tok, c_ctx = self.coefficients
        value = c0 + c_seq * shape.num_seqs + c_tok * shape.num_tokens + c_ctx * (
            shape.attended / 1000.0)
        return StepTime(max(value, 1e-6), None)


@dataclass(frozen=True, slots=True)
class ScaledSteps:
    """Another model's steps, each ``factor`` times as long: one fresh server's own speed
    (``sweetspot compare`` draws one per simulated server; see ``SimBackend``). The front end's
    per-request costs are the inner model's."""

    inner: StepTimeModel
    factor: float

    @property
    def request_latency_s(self) -> float:
        return self.inner.request_latency_s

    @property
    def request_intake_s(self) -> float:
        return self.inner.request_intake_s

    def step_time(self, shape: StepShape, *, async_scheduling: bool,
                  cpu_scheduled: bool = True) -> StepTime:
        step = self.inner.step_time(shape, async_scheduling=async_scheduling,
                                    cpu_scheduled=cpu_scheduled)
        return StepTime(step.duration_s * self.factor, step.compute_bound)
