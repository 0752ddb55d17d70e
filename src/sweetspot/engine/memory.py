"""vLLM's start-up memory arithmetic: how many KV-cache tokens a configuration gets, or why it
cannot start.

vLLM V1 (``gpu_worker.determine_available_memory``) profiles one dummy forward pass of
``max_num_batched_tokens`` tokens and one dummy sampling step of ``max_num_seqs`` requests, then::

    KV bytes = gpu_memory_utilization x device total
               - (weights + activation peak + non-torch increase [+ CUDA graphs, >= 0.21])

and cuts that into blocks of ``block_size`` tokens. ``--kv-cache-memory-bytes`` replaces the whole
subtraction with a fixed size. Before 0.21 the CUDA graphs were captured after the KV cache was
allocated, so they had to fit in the ``1 - utilisation`` margin next to the CUDA context: the
reason a utilisation of 0.98-0.99 used to crash at start-up.

The constants below are estimates; each says where it comes from. The estimate is checked against
vLLM's own log line for a published case (P6 in public-cases.md: Qwen2-7B, A100 80GB,
utilisation 0.25, vLLM 0.10.1.1 -> 93,872 KV tokens) in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.version import Version

from sweetspot.engine.releases import (
    CUDA_GRAPHS_PROFILED_SINCE,
    KV_LOG_TOKENS_FIRST_SINCE,
    resolve_defaults,
)
from sweetspot.spec.hardware import GiB, Hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import ModelArch
from sweetspot.spec.quant import Quantization

__all__ = ["TENSOR_PARALLEL_SIZES", "FitFinding", "MemoryEstimate", "estimate_memory",
           "fit_finding", "smallest_tensor_parallel_size"]

# Non-torch memory that appears during profiling (cuBLAS/cuDNN workspaces, allocator slack):
# vLLM V1 logs 0.1-0.2 GiB on one GPU. Tensor parallelism adds NCCL and custom all-reduce
# buffers (the TP=2 profile in vLLM PR #10511 shows ~1.8 GiB more non-torch memory per GPU
# than TP=1 with the CUDA context counted; about 0.4 GiB of it are communication buffers).
NON_TORCH_BYTES = int(0.1 * GiB)
NON_TORCH_TP_BYTES = int(0.4 * GiB)
# CUDA context and kernels loaded before vLLM's baseline snapshot: it is outside vLLM's
# accounting but occupies the device (nvidia-smi shows ~0.5 GiB per process on A100/H100).
CUDA_CONTEXT_BYTES = int(0.5 * GiB)
# Memory the captured CUDA graphs hold. vLLM logs "Graph capturing finished ... took
# 0.3-0.7 GiB" for 3-14B models with the default capture sizes; 0.5 GiB is the middle.
CUDA_GRAPH_BYTES = int(0.5 * GiB)
# Bytes of live tensors per logit in the dummy sampling step (max_num_seqs x vocab): bf16 logits,
# their fp32 copy, softmax probabilities, exponential draws and the quotient, some freed
# before the next is made. 14 B fits the P6 case to 0.2 %.
SAMPLER_BYTES_PER_LOGIT = 14
# Tensor-parallel sizes a finding may suggest: the GPUs of one node. Past eight a model is split
# across nodes (pipeline parallelism), which this memory model does not describe.
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Per-GPU memory budget of one configuration. ``failure`` is vLLM's own message when the
    server would refuse to start (status ``oom``), else None."""

    total_bytes: int  # device total as the CUDA runtime reports it
    budget_bytes: int  # gpu_memory_utilization x total (what vLLM may use)
    weight_bytes: int  # target + draft weights on this GPU
    activation_bytes: int  # profiled torch peak
    non_torch_bytes: int
    cuda_graph_bytes: int  # 0 with enforce_eager
    kv_cache_bytes: int  # available for KV blocks (may be <= 0 when it fails)
    kv_bytes_per_token: int  # per GPU, target + draft
    block_size: int
    num_blocks: int
    kv_cache_tokens: int  # what vLLM logs as "KV cache size: N tokens"
    max_model_len: int
    max_concurrency: float  # requests of max_model_len that fit at once
    peak_device_bytes: int  # what nvidia-smi would show once serving
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def concurrency_at(self, tokens_per_request: int) -> float:
        """Requests of ``tokens_per_request`` tokens (prompt + output) that fit in the KV cache."""
        blocks = -(-tokens_per_request // self.block_size)
        return self.num_blocks / blocks if blocks else 0.0

    def log_line(self, version: Version) -> str:
        """The capacity line as ``vllm serve`` prints it at start-up."""
        if version >= KV_LOG_TOKENS_FIRST_SINCE:
            return (
                f"GPU KV cache size: {self.kv_cache_tokens:,} tokens, Maximum concurrency for "
                f"{self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x"
            )
        return (
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens\n"
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
            f"{self.max_concurrency:.2f}x"
        )


def _activation_bytes(arch: ModelArch, config: ServingConfig, tp: int) -> int:
    """Torch peak of the profiling run: the larger of the forward pass over
    max_num_batched_tokens tokens and the sampling step over max_num_seqs requests."""
    h = arch.hidden_size
    # Live per token at the MLP, the widest point: residual, normed input and output (~4 h) and
    # the gate/up projection, its activation (3 x width). Experts: top-k copies of the width.
    if arch.is_moe:
        width = arch.num_experts_per_tok * (3 * arch.moe_intermediate_size + h)
    else:
        width = 3 * arch.intermediate_size
    per_token = 2 * (4 * h + width // tp)
    forward = config.max_num_batched_tokens * per_token
    sampler = config.max_num_seqs * arch.vocab_size * SAMPLER_BYTES_PER_LOGIT // tp
    return int(max(forward, sampler))


def estimate_memory(
    arch: ModelArch,
    quant: Quantization,
    hardware: Hardware,
    config: ServingConfig,
    version: Version,
    *,
    draft: ModelArch | None = None,
    cpu_kvcache_space_bytes: int | None = None,
) -> MemoryEstimate:
    """Estimate the per-GPU memory of ``config`` as vLLM ``version`` would lay it out.

    ``draft`` is the draft model of draft-model/EAGLE speculation (its weights and KV cache share
    the device). ``cpu_kvcache_space_bytes`` is ``VLLM_CPU_KVCACHE_SPACE`` on the CPU build.
    """
    config = resolve_defaults(config, version, hardware, arch.max_position_embeddings)
    tp = config.tensor_parallel_size
    total = hardware.usable_memory_bytes
    budget = int(config.gpu_memory_utilization * total)
    weights, kv_per_token = _weights_and_kv_per_token(arch, quant, draft, config, tp)
    activations = _activation_bytes(arch, config, tp)
    non_torch = NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if tp > 1 else 0)
    graphs = 0 if (config.enforce_eager or hardware.is_cpu) else CUDA_GRAPH_BYTES
    graphs_counted = version >= CUDA_GRAPHS_PROFILED_SINCE
    context = 0 if hardware.is_cpu else CUDA_CONTEXT_BYTES

    profiled = budget - weights - activations - non_torch - (graphs if graphs_counted else 0)
    kv_bytes = _kv_cache_bytes(config, hardware, cpu_kvcache_space_bytes, profiled)

    block = config.block_size
    num_blocks = max(0, kv_bytes // (kv_per_token * block))
    tokens = num_blocks * block
    max_len = config.max_model_len
    blocks_per_request = -(-max_len // block)
    kv_allocated = num_blocks * block * kv_per_token
    peak = context + weights + activations + non_torch + graphs + kv_allocated

    estimate = MemoryEstimate(
        total_bytes=total,
        budget_bytes=budget,
        weight_bytes=weights,
        activation_bytes=activations,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=kv_per_token,
        block_size=block,
        num_blocks=num_blocks,
        kv_cache_tokens=tokens,
        max_model_len=max_len,
        max_concurrency=num_blocks / blocks_per_request,
        peak_device_bytes=peak,
    )
    failure = _startup_failure(estimate, hardware, context, graphs_counted, kv_per_token)
    return estimate if failure is None else replace(estimate, failure=failure)


def _weights_and_kv_per_token(arch: ModelArch, quant: Quantization, draft: ModelArch | None,
                              config: ServingConfig, tp: int) -> tuple[int, int]:
    """Weight bytes and KV bytes per token on one GPU, the draft model's included."""
    weights = arch.weight_bytes(quant) // tp
    kv_per_token = arch.kv_bytes_per_token(config.kv_cache_dtype, tp)
    if draft is not None:
        weights += draft.weight_bytes(draft.default_quantization()) // tp
        kv_per_token += draft.kv_bytes_per_token(config.kv_cache_dtype, tp)
    return weights, kv_per_token


def _kv_cache_bytes(config: ServingConfig, hardware: Hardware,
                    cpu_kvcache_space_bytes: int | None, profiled: int) -> int:
    """The KV cache's size: ``--kv-cache-memory-bytes`` when given, ``VLLM_CPU_KVCACHE_SPACE``
    on the CPU build, else what the profile leaves of the budget (``profiled``)."""
    if config.kv_cache_memory_bytes is not None:
        return config.kv_cache_memory_bytes
    if hardware.is_cpu and cpu_kvcache_space_bytes is not None:
        return cpu_kvcache_space_bytes
    return profiled


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


def _startup_failure(
    est: MemoryEstimate,
    hardware: Hardware,
    context: int,
    graphs_counted: bool,
    kv_per_token: int,
) -> str | None:
    """vLLM's message for a start-up it would refuse, in the order vLLM checks."""
    device = "CPU" if hardware.is_cpu else "GPU"
    free_at_start = est.total_bytes - context
    if not hardware.is_cpu and free_at_start < est.budget_bytes:
        return (
            f"Free memory on device ({_gib(free_at_start)}/{_gib(est.total_bytes)} GiB) on "
            f"startup is less than desired GPU memory utilization "
            f"({est.budget_bytes / est.total_bytes:.2f}, {_gib(est.budget_bytes)} GiB). "
            "Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
    if context + est.weight_bytes > est.total_bytes:
        return (
            f"Failed to load model - not enough {device} memory: weights need "
            f"{_gib(est.weight_bytes)} GiB of {_gib(est.total_bytes)} GiB. "
            "torch.OutOfMemoryError: CUDA out of memory."
        )
    if est.kv_cache_bytes <= 0 or est.num_blocks == 0:
        return (
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    needed = -(-est.max_model_len // est.block_size) * est.block_size * kv_per_token
    if needed > est.kv_cache_bytes:
        estimated = est.num_blocks * est.block_size
        return (
            f"To serve at least one request with the model's max seq len ({est.max_model_len}), "
            f"({_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
            f"cache memory ({_gib(est.kv_cache_bytes)} GiB). Based on the available memory, "
            f"the estimated maximum model length is {estimated}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    if not graphs_counted and est.peak_device_bytes > est.total_bytes:
        return (
            "torch.OutOfMemoryError: CUDA out of memory during CUDA graph capture: the graphs "
            f"({_gib(est.cuda_graph_bytes)} GiB) did not fit beside gpu-memory-utilization x "
            f"total ({_gib(est.budget_bytes)} GiB) and the CUDA context. Lower "
            "--gpu-memory-utilization or use --enforce-eager."
        )
    return None


@dataclass(frozen=True, slots=True)
class FitFinding:
    """Why a configuration cannot start on the GPUs it asks for, and on how many it would."""

    message: str  # one line: what does not fit, vLLM's reason, the tensor-parallel size that fits
    tensor_parallel_size: int | None  # smallest that fits; None: none up to 8, or not a GPU


def smallest_tensor_parallel_size(
    arch: ModelArch,
    quant: Quantization,
    hardware: Hardware,
    config: ServingConfig,
    version: Version,
    *,
    draft: ModelArch | None = None,
) -> int | None:
    """The smallest tensor-parallel size, from the configured one up to 8, on which ``config``
    starts; None when none does. vLLM also needs the attention heads to split evenly."""
    start = config.tensor_parallel_size or 1
    for tp in TENSOR_PARALLEL_SIZES:
        if tp < start or arch.num_heads % tp:
            continue
        split = config.replace(tensor_parallel_size=tp)
        if estimate_memory(arch, quant, hardware, split, version, draft=draft).ok:
            return tp
    return None


def fit_finding(
    arch: ModelArch,
    quant: Quantization,
    hardware: Hardware,
    config: ServingConfig,
    version: Version,
    *,
    draft: ModelArch | None = None,
    cpu_kvcache_space_bytes: int | None = None,
) -> FitFinding | None:
    """None when ``config`` starts; else the finding every command reports instead of a
    command line that cannot start."""
    est = estimate_memory(arch, quant, hardware, config, version, draft=draft,
                          cpu_kvcache_space_bytes=cpu_kvcache_space_bytes)
    if est.ok:
        return None
    tp_now = config.tensor_parallel_size or 1
    where = (f"one {hardware.display_name}" if tp_now == 1
             else f"{tp_now} x {hardware.display_name} (--tensor-parallel-size {tp_now})")
    reason = est.failure.split(". ")[0].rstrip(".")
    head = f"{arch.name} ({quant.name}) does not fit on {where}: {reason}"
    # More GPUs do not help a utilisation above what is free at start-up, nor the CPU build.
    if hardware.is_cpu or est.total_bytes - CUDA_CONTEXT_BYTES < est.budget_bytes:
        return FitFinding(head, None)
    tp = smallest_tensor_parallel_size(arch, quant, hardware, config, version, draft=draft)
    shorter = _shorter_model_len(arch, quant, hardware, config, version, draft, tp)
    if tp is None:
        return FitFinding(f"{head}; not even --tensor-parallel-size "
                          f"{TENSOR_PARALLEL_SIZES[-1]} fits{shorter}: use GPUs with more "
                          "memory or a quantised checkpoint", None)
    return FitFinding(f"{head}; it fits with --tensor-parallel-size {tp} on {tp} GPUs{shorter}",
                      tp)


def _shorter_model_len(arch: ModelArch, quant: Quantization, hardware: Hardware,
                       config: ServingConfig, version: Version, draft: ModelArch | None,
                       tp_fits: int | None) -> str:
    """Fewer GPUs that would do with a shorter max-model-len (the weights fit, the KV cache
    holds blocks, only one request of the model's full length does not), as vLLM's own message
    suggests: "" when there are none."""
    start = config.tensor_parallel_size or 1
    for tp in TENSOR_PARALLEL_SIZES:
        if tp < start or (tp_fits is not None and tp >= tp_fits) or arch.num_heads % tp:
            continue
        est = estimate_memory(arch, quant, hardware, config.replace(tensor_parallel_size=tp),
                              version, draft=draft)
        if not est.ok and est.num_blocks and est.kv_cache_tokens < est.max_model_len:
            gpus = "one GPU" if tp == 1 else f"{tp} GPUs (--tensor-parallel-size {tp})"
            return (f", or on {gpus} with --max-model-len {est.kv_cache_tokens} or less"
                    f" (of {est.max_model_len})")
    return ""
