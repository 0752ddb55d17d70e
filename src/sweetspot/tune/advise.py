"""``sweetspot advise``: instant, explained starting points for the four goals, from the memory
model and the workload's statistics alone (no simulation, no measurement).

The rules, each stated where it is applied:
- max-model-len covers the workload's P99 prompt + output with a 20 % margin, rounded up to a
  multiple of 1024 (never above the model's own limit);
- the KV cache decides how many requests can run at once: KV tokens / tokens per request, where a
  shared prefix is stored once when prefix caching is on;
- max-num-seqs is a power of two no larger than that (more only preempts), sized per goal;
- Little's law (rate x time in system) says how many requests the traffic keeps in flight;
- priority classes in the workload call for the priority policy.
These are starting points for ``sweetspot tune``, which measures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.engine.flags import flag_table
from sweetspot.engine.memory import FitFinding, MemoryEstimate, estimate_memory, fit_finding
from sweetspot.engine.releases import (
    ASYNC_SCHEDULING_DEFAULT_SINCE,
    CUDA_GRAPHS_PROFILED_SINCE,
    DRAFT_MODEL_SINCE,
    NUM_SCHEDULER_STEPS_REMOVED,
    SPECULATIVE_CONFIG_SINCE,
    V1_ENGINE_SINCE,
    vllm_default,
)
from sweetspot.engine.render import render_serve, render_yaml
from sweetspot.spec.hardware import GiB, Hardware
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.model import ModelArch, checkpoint_quantization, load_model
from sweetspot.spec.quant import Quantization
from sweetspot.spec.workload import WorkloadSpec, WorkloadStats, workload_stats

__all__ = ["GOALS", "Advice", "Pick", "advise"]

GOALS = ("max-throughput", "low-latency", "memory-limited", "balanced")
MODEL_LEN_MARGIN = 1.2
# Draft models worth proposing: same tokenizer family, about 1/10 of the target or less.
DRAFT_FOR_FAMILY = {"Qwen2ForCausalLM": "qwen2.5-0.5b"}
LOW_LATENCY_SPEC_TOKENS = 4


@dataclass(frozen=True, slots=True)
class Pick:
    goal: str
    config: ServingConfig
    command: str
    yaml: str
    memory: MemoryEstimate
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Advice:
    model_ref: str  # the checkpoint the commands serve
    hardware: Hardware
    version: Version
    quant: Quantization
    workload: WorkloadSpec
    stats: WorkloadStats
    max_model_len: int
    picks: tuple[Pick, ...]  # empty when the model does not fit (``unfit``)
    guide_notes: tuple[str, ...]
    unfit: FitFinding | None = None  # set when no pick can start on the GPUs asked for


def _pow2_floor(x: float, low: int = 1, high: int = 1024) -> int:
    value = 2 ** math.floor(math.log2(max(x, 1)))
    return max(low, min(high, value))


def _pow2_ceil(x: float, low: int = 1, high: int = 1024) -> int:
    value = 2 ** math.ceil(math.log2(max(x, 1)))
    return max(low, min(high, value))


def _model_len(stats: WorkloadStats, arch: ModelArch) -> int:
    wanted = math.ceil(stats.total.p99 * MODEL_LEN_MARGIN / 1024) * 1024
    return min(wanted, arch.max_position_embeddings)


def _tokens_per_request(stats: WorkloadStats, wl: WorkloadSpec) -> float:
    """KV tokens one request holds at its end. With prefix caching (on by default) a shared
    prefix's blocks are held once for all requests that carry it, not once per request."""
    shared = stats.prefix_share * wl.prefix.length
    return max(stats.prompt.mean + stats.output.mean - shared, 1.0)


def _decode_step_s(arch: ModelArch, quant: Quantization, hw: Hardware, tp: int) -> float:
    """Time of a small-batch decode step: streaming the weights once (at 70 % of peak
    bandwidth, the middle of the 50-75 % public measurements report), each GPU its share."""
    return arch.weight_bytes(quant) / tp / (0.7 * hw.bandwidth_bytes_per_s)


def _in_flight(stats: WorkloadStats, wl: WorkloadSpec, step_s: float) -> float:
    """Little's law: requests the traffic keeps in the server at light load."""
    if wl.arrival.process == "closed" and wl.arrival.concurrency:
        return float(wl.arrival.concurrency)
    if stats.arrival_rate is None:
        return float(wl.num_requests)
    return stats.arrival_rate * stats.output.mean * step_s


def advise(
    model: str,
    hardware: Hardware,
    workload: WorkloadSpec,
    version: Version,
    quant: Quantization | None = None,
    tensor_parallel_size: int = 1,
) -> Advice:
    resolved = load_model(model)
    arch = resolved.arch
    quant = checkpoint_quantization(model, resolved, quant)
    model_ref = _checkpoint(model, arch, quant, resolved.quantization)
    if arch.num_heads % tensor_parallel_size:
        raise SweetspotError(f"--tensor-parallel-size {tensor_parallel_size}: vLLM splits "
                             f"attention heads evenly, and {arch.name} has {arch.num_heads}")
    stats = workload_stats(workload)
    max_len = _model_len(stats, arch)
    base = ServingConfig(max_model_len=max_len, quantization=quant.vllm_flag,
                         tensor_parallel_size=tensor_parallel_size if tensor_parallel_size > 1
                         else None)
    if workload.priorities:
        base = base.replace(scheduling_policy="priority")
    if version < V1_ENGINE_SINCE and workload.prefix.length:
        base = base.replace(enable_prefix_caching=True)  # off by default in V0

    def memory(config: ServingConfig, draft: ModelArch | None = None) -> MemoryEstimate:
        return estimate_memory(arch, quant, hardware, config, version, draft=draft)

    per_request = _tokens_per_request(stats, workload)
    step_s = _decode_step_s(arch, quant, hardware, tensor_parallel_size)
    in_flight = _in_flight(stats, workload, step_s)
    common = _common_reasons(stats, workload, max_len, version)
    context = _Context(arch, quant, hardware, version, stats, workload, per_request, in_flight,
                       step_s, memory)
    builders = (_max_throughput, _low_latency, _memory_limited, _balanced)
    picks = []
    for goal, build in zip(GOALS, builders, strict=True):
        config, reasons, draft = _v0_chunking(*build(context, base), version, max_len)
        est = memory(config, draft)
        if not est.ok:  # never print a command that cannot start
            config = config.replace(gpu_memory_utilization=0.95, speculative=None)
            est = memory(config)
            if not est.ok:  # the model itself does not fit: the finding, no command at all
                unfit = fit_finding(arch, quant, hardware, config, version)
                return Advice(model_ref, hardware, version, quant, workload, stats, max_len,
                              (), _guide_notes(version, hardware), unfit)
            reasons.append("fell back to utilisation 0.95: the goal's own settings do not fit")
        rendered = render_serve(config, model_ref, version)
        reasons += [f"note: {n}" for n in rendered.notes]
        reasons.append(
            f"KV cache {est.kv_cache_tokens:,} tokens ({est.kv_cache_bytes / GiB:.1f} GiB): "
            f"about {est.kv_cache_tokens / per_request:.0f} requests of this workload at once"
        )
        picks.append(Pick(goal, config, rendered.command(),
                          render_yaml(config, model_ref, version), est,
                          (*common, *reasons)))
    return Advice(model_ref, hardware, version, quant, workload, stats, max_len, tuple(picks),
                  _guide_notes(version, hardware))


def _v0_chunking(config: ServingConfig, reasons: list[str], draft: ModelArch | None,
                 version: Version, max_len: int
                 ) -> tuple[ServingConfig, list[str], ModelArch | None]:
    """A V0 pick whose token budget is under max-model-len must chunk its prefills."""
    tokens = config.max_num_batched_tokens
    if version < V1_ENGINE_SINCE and tokens is not None and tokens < max_len:
        config = config.replace(enable_chunked_prefill=True)
        reasons.append(f"--enable-chunked-prefill: {version}'s V0 engine takes whole prompts "
                       f"unless it chunks them, and a {tokens}-token step is shorter than "
                       "max-model-len")
    return config, reasons, draft


@dataclass(frozen=True, slots=True)
class _Context:
    arch: ModelArch
    quant: Quantization
    hardware: Hardware
    version: Version
    stats: WorkloadStats
    workload: WorkloadSpec
    per_request: float
    in_flight: float
    step_s: float
    memory: Callable[..., MemoryEstimate]  # (config, draft=None) -> estimate

    def kv_concurrency(self, config: ServingConfig) -> float:
        return self.memory(config).kv_cache_tokens / self.per_request

    def big_gpu(self) -> bool:
        return vllm_default("max_num_seqs", self.version, self.hardware) >= 1024


def _checkpoint(model: str, arch: ModelArch, quant: Quantization,
                implied: Quantization | None) -> str:
    """The checkpoint to serve: the name given when it already names one (a local folder, a
    quantised repository of that scheme), else the catalog's repository plus the
    quantisation's suffix (``Qwen/Qwen2.5-14B-Instruct`` + ``-AWQ``; ``...-AWQ`` asked for
    bf16 is ``Qwen/Qwen2.5-14B-Instruct``)."""
    if Path(model).is_dir() or implied == quant:
        return model
    if implied is not None:
        return arch.hf_id + quant.checkpoint_suffix
    return (model if "/" in model else arch.hf_id) + quant.checkpoint_suffix


def _common_reasons(stats: WorkloadStats, wl: WorkloadSpec, max_len: int,
                    version: Version) -> list[str]:
    out = [
        f"max-model-len {max_len}: P99 prompt+output is {stats.total.p99:.0f} tokens, +20 % "
        "margin, rounded up to 1024",
    ]
    if wl.prefix.length and stats.prefix_share > 0:
        how = ("on by default" if version >= V1_ENGINE_SINCE
               else f"--enable-prefix-caching: off by default in {version}'s V0 engine")
        out.append(
            f"prefix caching ({how}) reuses the {wl.prefix.length}-token shared prefix "
            f"of {stats.prefix_share:.0%} of requests ({stats.prefix_tokens_share:.0%} of prompt "
            "tokens): their prefill skips it"
        )
    if wl.priorities:
        classes = ", ".join(f"{p.name}={p.priority}" for p in wl.priorities)
        out.append(f"--scheduling-policy priority: the workload has priority classes ({classes}); "
                   "requests must send their 'priority' (lower first)")
    return out


def _max_throughput(c: _Context, base: ServingConfig):
    config = base.replace(gpu_memory_utilization=0.95,
                          max_num_batched_tokens=16384 if c.big_gpu() else 4096)
    kv_seqs = c.kv_concurrency(config)
    seqs = _pow2_floor(kv_seqs, 16)
    config = config.replace(max_num_seqs=seqs)
    if c.workload.priorities:
        config = config.replace(scheduling_policy=None)
    return config, [
        "gpu-memory-utilization 0.95: every extra GiB is KV cache, i.e. more requests per step",
        f"max-num-seqs {seqs}: the KV cache holds about {kv_seqs:.0f} requests of this workload; "
        "a larger limit would only admit requests that get preempted",
        f"max-num-batched-tokens {config.max_num_batched_tokens}: large prefill chunks keep the "
        "GPU's matrix units busy",
        "no speculative decoding: at large batches the verify step is compute-bound and rejected "
        "draft tokens cost throughput",
    ], None


def _low_latency(c: _Context, base: ServingConfig):
    need = _pow2_ceil(2 * c.in_flight, 16, 256)
    config = base.replace(max_num_batched_tokens=2048)
    seqs = min(need, _pow2_floor(c.kv_concurrency(config), 16))
    config = config.replace(max_num_seqs=seqs)
    reasons = [
        f"max-num-seqs {seqs}: the traffic keeps about {c.in_flight:.0f} requests in flight "
        "(Little's law at a light-load step time); twice that leaves headroom for bursts",
        "max-num-batched-tokens 2048: small prefill chunks so running decodes are not stalled "
        "behind a long prompt (lower ITL P99, slightly higher TTFT for long prompts)",
    ]
    flags = flag_table()
    mode = flags.info("--performance-mode")
    if mode is not None and flags.present(mode, c.version) and not c.hardware.is_cpu:
        config = config.replace(performance_mode="interactivity")
        reasons.append("--performance-mode interactivity: fine-grained CUDA graphs for small "
                       "batches")
    spec, draft, why = _speculation(c)
    if spec is not None:
        config = config.replace(speculative=spec)
        reasons.append(why)
    return config, reasons, draft


def _speculation(c: _Context) -> tuple[SpeculativeConfig | None, ModelArch | None, str]:
    if c.hardware.is_cpu:
        return None, None, ""
    draft_name = DRAFT_FOR_FAMILY.get(c.arch.architecture)
    draft = load_model(draft_name).arch if draft_name else None
    if (draft is not None and draft.name != c.arch.name and c.version >= DRAFT_MODEL_SINCE
            and draft.param_counts().total * 10 <= c.arch.param_counts().total):
        spec = SpeculativeConfig("draft_model", LOW_LATENCY_SPEC_TOKENS, model=draft.hf_id)
        return spec, draft, (
            f"draft-model speculation with {draft.hf_id}, {LOW_LATENCY_SPEC_TOKENS} tokens: at "
            "small batches a step is bound by streaming the weights, so verifying several "
            "tokens per step is nearly free; check the acceptance rate on your traffic first. "
            "vLLM turns async scheduling off with draft-model speculation")
    spec = SpeculativeConfig("ngram", LOW_LATENCY_SPEC_TOKENS, prompt_lookup_max=4,
                             prompt_lookup_min=2)
    return spec, None, (
        f"ngram speculation, {LOW_LATENCY_SPEC_TOKENS} tokens: no draft model needed; pays off "
        "when outputs repeat the prompt (RAG, code edits), costs little otherwise")


def _memory_limited(c: _Context, base: ServingConfig):
    target = max(16.0, 2 * c.in_flight)
    seqs = _pow2_ceil(target, 16, 256)
    config = base.replace(max_num_seqs=seqs, max_num_batched_tokens=2048)
    if c.hardware.supports_fp8:
        config = config.replace(kv_cache_dtype="fp8")
    probe = c.memory(config.replace(gpu_memory_utilization=0.5))
    fixed = probe.weight_bytes + probe.activation_bytes + probe.non_torch_bytes + (
        probe.cuda_graph_bytes if c.version >= CUDA_GRAPHS_PROFILED_SINCE else 0)
    kv_tokens = max(seqs * c.per_request, config.max_model_len)
    needed = fixed + kv_tokens * probe.kv_bytes_per_token * 1.05
    util = min(0.95, math.ceil(needed / c.hardware.usable_memory_bytes * 20) / 20)
    config = config.replace(gpu_memory_utilization=util)
    reasons = [
        f"gpu-memory-utilization {util}: weights {probe.weight_bytes / GiB:.1f} GiB + activations "
        f"and overheads {(fixed - probe.weight_bytes) / GiB:.1f} GiB + KV for {seqs} requests "
        f"of this workload, rounded up to 0.05 — the rest of the GPU stays free for other "
        "models (--kv-cache-memory-bytes sets the KV size exactly, from 0.11)",
        f"max-num-seqs {seqs} and max-num-batched-tokens 2048: a small profiling peak keeps the "
        "activation reserve small",
    ]
    if config.kv_cache_dtype == "fp8":
        reasons.append("--kv-cache-dtype fp8: half the KV bytes per token on FP8 hardware")
    return config, reasons, None


def _balanced(c: _Context, base: ServingConfig):
    util = vllm_default("gpu_memory_utilization", c.version, c.hardware)
    config = base.replace(gpu_memory_utilization=util,
                          max_num_batched_tokens=8192 if c.big_gpu() else 4096)
    kv_seqs = c.kv_concurrency(config)
    seqs = _pow2_floor(min(kv_seqs, 256), 16)
    config = config.replace(max_num_seqs=seqs)
    return config, [
        f"gpu-memory-utilization {util}: vLLM's default for {c.version}, with headroom for "
        "other processes on the GPU",
        f"max-num-seqs {seqs}: the guide's 256 unless the KV cache holds fewer "
        f"(about {kv_seqs:.0f} here), so requests are not admitted only to be preempted",
        f"max-num-batched-tokens {config.max_num_batched_tokens}: a middle prefill chunk",
    ], None


def _guide_notes(version: Version, hardware: Hardware) -> tuple[str, ...]:
    """Where the field guide's rules do not hold for this version and GPU."""
    notes = [
        "max-model-len does not reserve KV memory per sequence: the KV cache is paged "
        "and filled on demand; a smaller value only has to fit once and shapes some defaults",
        "--scheduling-policy lof does not exist: vLLM has fcfs and priority",
        "--speculative-model/--num-speculative-tokens are gone since 0.8.3: use "
        "--speculative-config; 8 draft tokens is deep, 3-5 is usual"
        if version >= SPECULATIVE_CONFIG_SINCE else
        f"--speculative-model/--num-speculative-tokens are {version}'s flags (--speculative-"
        "config from 0.8.3); 8 draft tokens is deep, 3-5 is usual",
    ]
    if version < V1_ENGINE_SINCE:
        notes.append(f"--num-scheduler-steps is {version}'s V0 multi-step scheduling: N decode "
                     "steps per scheduling decision (the 0.6.0 release's own benchmarks ran 10), "
                     "at the cost of later admissions; sweetspot simulates it")
    if version >= NUM_SCHEDULER_STEPS_REMOVED:
        on = " and is on by default" if version >= ASYNC_SCHEDULING_DEFAULT_SINCE else ""
        notes.append(f"--num-scheduler-steps is gone since {NUM_SCHEDULER_STEPS_REMOVED}: async "
                     f"scheduling hides the scheduling overhead{on}")
    util = vllm_default("gpu_memory_utilization", version, hardware)
    seqs = vllm_default("max_num_seqs", version, hardware)
    differ = [f"gpu-memory-utilization {util} (the guide says 0.9)" if util != 0.9 else "",
              f"max-num-seqs {seqs} (the guide says 256)" if seqs != 256 else ""]
    notes.append(f"vLLM {version} defaults on {hardware.name}: "
                 + ", ".join(d for d in differ if d) + (", " if any(differ) else "")
                 + ("prefix caching on (the guide says to turn it on)"
                    if version >= V1_ENGINE_SINCE else
                    "prefix caching off, as in the guide's time (V0 engine)"))
    return tuple(notes)
