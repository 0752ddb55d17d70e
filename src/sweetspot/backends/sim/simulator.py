"""The simulated trial: a configuration's start-up outcome, then the workload through the
scheduler mirror on a simulated clock, emitting the same per-request records as the load
generator.

Time: the clock starts at 0 when the first request may be sent. A request reaches the engine
half the front end's latency after it is sent and its tokens reach the client half of it after
the step that produced them ends. The engine runs steps back to back while it has work and idles
until the next arrival otherwise. A concurrency limit (``max_concurrency``) holds a request
until an earlier one's last token arrived, as ``vllm bench serve --max-concurrency`` does.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from packaging.version import Version

from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim.cost import (
    RooflineModel,
    ScaledSteps,
    StepShape,
    StepTimeModel,
    roofline_constants,
)
from sweetspot.backends.sim.loop import EngineLoop
from sweetspot.backends.sim.scheduler import Scheduler, SchedulerConfig
from sweetspot.backends.sim.speculative import plan_speculation
from sweetspot.engine.memory import MemoryEstimate, estimate_memory
from sweetspot.engine.releases import RESERVE_FULL_ISL_SINCE, V1_ENGINE_SINCE, resolve_defaults
from sweetspot.engine.validate import validate_config
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import ModelArch
from sweetspot.spec.quant import Quantization
from sweetspot.spec.requests import Request

__all__ = ["SimFacts", "SimRun", "SimSetup", "SimStart", "simulate", "start"]

@dataclass(frozen=True, slots=True)
class SimSetup:
    """What the simulated server is: hardware, model, launch configuration, vLLM release."""

    hardware: Hardware
    arch: ModelArch
    quant: Quantization
    config: ServingConfig
    version: Version
    engine: str = "auto"  # "v1", "v0" (pre-V1 engine) or "auto" (v0 when multi-step is set)
    spec_acceptance: float | None = None  # per-position acceptance; None = the method's default
    cpu_kvcache_space_bytes: int | None = None  # VLLM_CPU_KVCACHE_SPACE on the CPU build
    # No API server: the engine in the caller's process (LLM.generate, `vllm bench throughput`
    # and `latency`): no HTTP, no serial intake, every request in the engine at once.
    offline: bool = False
    # The API the client calls: "completions" (token ids) or "chat" (messages: the server
    # renders the chat template and tokenises, see ``frontend``).
    endpoint: str = "completions"


@dataclass(frozen=True, slots=True)
class SimFacts:
    """What the server would report beside the client's records."""

    kv_cache_tokens: int
    num_blocks: int
    max_concurrency: float  # requests of max_model_len that fit, as vLLM logs it
    kv_log_line: str
    peak_kv_usage: float  # fraction of blocks referenced at the fullest moment
    preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    steps: int
    compute_bound_steps: int | None  # None for a calibrated model (it cannot tell)
    mean_batch: float  # requests per step
    spec_draft_tokens: int
    spec_accepted_tokens: int
    engine: str = "V1"  # what ran: "V0", "V0, multi-step 10", "V1, async scheduling", ...
    max_batch: int = 0  # most requests in one step
    max_step_tokens: int = 0  # most tokens in one step
    # Share of the time the engine was busy while requests kept arriving (from the first
    # arrival to the last); None when they all came at once. Near 1: at or past capacity.
    busy_share: float | None = None

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries \
            else None

    @property
    def compute_bound_share(self) -> float | None:
        if self.compute_bound_steps is None or not self.steps:
            return None
        return self.compute_bound_steps / self.steps

    @property
    def spec_acceptance_rate(self) -> float | None:
        return self.spec_accepted_tokens / self.spec_draft_tokens if self.spec_draft_tokens \
            else None


@dataclass(frozen=True, slots=True)
class StepTrace:
    """Per step (for calibration): start time, duration and shape."""

    start_s: np.ndarray
    duration_s: np.ndarray
    shapes: tuple[StepShape, ...]


@dataclass(frozen=True, slots=True)
class SimRun:
    status: str  # "ok", "oom" or "invalid"
    cause: str | None  # vLLM's message for a failed start-up
    records: tuple[RequestRecord, ...]
    memory: MemoryEstimate | None
    facts: SimFacts | None
    config: ServingConfig  # with vLLM's defaults filled in
    trace: StepTrace | None = None


def _failed(status: str, cause: str, config: ServingConfig, memory=None) -> SimRun:
    return SimRun(status, cause, (), memory, None, config)


@dataclass(frozen=True, slots=True)
class SimStart:
    """The simulated server's start-up: vLLM's defaults filled in, its checks, its memory.
    ``status`` is "ok", "invalid" (vLLM would refuse the options) or "oom" (no room for the
    weights or the KV cache); ``cause`` says why in vLLM's words."""

    status: str
    cause: str | None
    config: ServingConfig  # with vLLM's defaults filled in
    memory: MemoryEstimate | None  # None where the options were refused first
    speculation: object | None = None  # the speculative plan (``plan_speculation``)
    v0: bool = False  # the pre-V1 engine runs (multi-step scheduling)


def start(setup: SimSetup) -> SimStart:
    """What starting ``setup``'s server would do, without running anything."""
    hw, arch, version = setup.hardware, setup.arch, setup.version
    config = resolve_defaults(setup.config, version, hw, arch.max_position_embeddings)
    errors = [p for p in validate_config(setup.config, version, hw, arch)
              if p.severity == "error"]
    if errors:
        return SimStart("invalid", "; ".join(p.message for p in errors), config, None)
    spec = plan_speculation(config.speculative, arch, setup.spec_acceptance)
    if isinstance(spec, str):
        return SimStart("invalid", spec, config, None)
    memory = estimate_memory(arch, setup.quant, hw, config, version, draft=spec.draft,
                             cpu_kvcache_space_bytes=setup.cpu_kvcache_space_bytes)
    if not memory.ok:
        return SimStart("oom", memory.failure, config, memory)
    # The V0 engine: before 0.8, and where a later release falls back to it (multi-step).
    v0 = setup.engine == "v0" or (setup.engine == "auto" and (
        version < V1_ENGINE_SINCE or (config.num_scheduler_steps or 1) > 1))
    return SimStart("ok", None, config, memory, spec, v0)


def _roofline(setup: SimSetup, started: SimStart) -> StepTimeModel:
    """The step-time model of the catalog hardware, for the started configuration."""
    config, spec = started.config, started.speculation
    return RooflineModel(
        setup.hardware, setup.arch, setup.quant, tensor_parallel_size=config.tensor_parallel_size,
        kv_bytes_per_token=setup.arch.kv_bytes_per_token(config.kv_cache_dtype,
                                                         config.tensor_parallel_size),
        enforce_eager=bool(config.enforce_eager), draft=spec.draft,
        cpu_drafting=spec.cpu_drafting, v0=started.v0,
        constants=roofline_constants(setup.version))


def _scheduler(started: SimStart, seed: int, version: Version) -> Scheduler:
    config, spec, v0 = started.config, started.speculation, started.v0
    # V0 with chunked prefill (its default over 32K of context) schedules as V1 does: decodes
    # first, then prompt chunks in the token budget (multi-step is then not mirrored).
    chunked = bool(config.enable_chunked_prefill)
    steps = (config.num_scheduler_steps or 1) if v0 and not chunked else 1
    sched_cfg = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        block_size=config.block_size,
        num_blocks=started.memory.num_blocks,
        chunked_prefill=chunked,
        long_prefill_threshold=config.long_prefill_token_threshold or 0,
        prefix_caching=bool(config.enable_prefix_caching),
        priority=config.scheduling_policy == "priority",
        spec_tokens=spec.k,
        v0=v0 and not chunked,
        multi_step=steps,
        reserve_full_isl=not v0 and version >= RESERVE_FULL_ISL_SINCE,
        lagged_release=bool(config.async_scheduling) and not v0,
    )
    rng = np.random.default_rng(seed)
    return Scheduler(sched_cfg, spec.drawer(rng) if spec.k else None)


def simulate(
    setup: SimSetup,
    requests: Sequence[Request],
    *,
    max_concurrency: int | None = None,
    model: StepTimeModel | None = None,
    seed: int = 0,
    trace: bool = False,
    warmup: int = 1,
    step_factor: float = 1.0,
    fresh: bool = True,
) -> SimRun:
    """Run ``requests`` through the simulated server ``setup`` describes.

    ``model`` is the step-time model (default: the roofline of the catalog hardware);
    ``seed`` drives the speculative acceptance draws; ``trace`` keeps every step's shape;
    every step takes ``step_factor`` times the model's time (a fresh server's own speed).
    ``warmup`` copies of the first request run to completion before the clock starts, as the
    test prompt ``vllm bench serve`` sends first: its prompt then sits in the prefix cache.
    ``fresh``: the server has served nothing before (without a warm-up its first step pays the
    start-up transient, ``RooflineConstants.fresh_start_s``, with the catalog's step model);
    False for a run on a server that served earlier runs.
    """
    started = start(setup)
    if started.status != "ok":
        return _failed(started.status, started.cause, started.config, started.memory)
    config = started.config
    # The catalog's model carries a fresh server's start-up transient; a given model is as is.
    transient = 0.0
    if fresh and model is None and not setup.hardware.is_cpu:
        transient = roofline_constants(setup.version).fresh_start_s
    model = model or _roofline(setup, started)
    model = model if step_factor == 1.0 else ScaledSteps(model, step_factor)
    collecting = gc.isenabled()
    gc.disable()  # the run allocates millions of small objects and frees none: skip GC passes
    try:
        records, facts, step_trace = _run(setup, started, requests, model, max_concurrency,
                                          seed, trace, warmup, transient)
    finally:
        # Back on once the engine's own objects have gone with _run's frame: the collection
        # that follows scans the run's records, not every request's scheduler state.
        if collecting:
            gc.enable()
    return SimRun("ok", None, records, started.memory, facts, config, step_trace)


def _run(setup: SimSetup, started: SimStart, requests: Sequence[Request], model: StepTimeModel,
         max_concurrency: int | None, seed: int, trace: bool, warmup: int, transient: float
         ) -> tuple[tuple[RequestRecord, ...], SimFacts, StepTrace | None]:
    """The warm-up, then the run: its records, the server's facts and the step trace. A run
    without warm-up pays ``transient`` (a fresh server's start-up) on its first step."""
    config = started.config
    scheduler = _scheduler(started, seed, setup.version)

    def new_loop(limit: int | None, keep_trace: bool, first_extra: float = 0.0) -> EngineLoop:
        return EngineLoop(scheduler, model,
                     async_scheduling=bool(config.async_scheduling) and not started.v0,
                     max_model_len=config.max_model_len, max_concurrency=limit, trace=keep_trace,
                     offline=setup.offline, endpoint=setup.endpoint,
                     first_step_extra_s=first_extra, intake_rounds=not started.v0)

    warmups = warmup if requests else 0
    scheduler.kv.expect([requests[0].prompt_token_ids] * warmups
                        + [r.prompt_token_ids for r in requests])
    if warmups:
        first = dataclasses.replace(requests[0], arrival_s=0.0)
        new_loop(1, False).run([dataclasses.replace(first, request_id=-1 - i)
                                for i in range(warmup)])
        scheduler.reset_stats()
    loop = new_loop(max_concurrency, trace, 0.0 if warmups else transient)
    records = loop.run(requests)
    step_trace = None
    if trace:
        step_trace = StepTrace(np.asarray(loop.starts), np.asarray(loop.durations),
                               tuple(loop.shapes))
    facts = _facts(started.memory, setup.version, scheduler, loop, _engine(setup, started))
    return records, facts, step_trace


def _engine(setup: SimSetup, started: SimStart) -> str:
    """The engine that ran, in words (the simulated server's facts)."""
    config = started.config
    parts = ["V0" if started.v0 else "V1"]
    if started.v0 and (config.num_scheduler_steps or 1) > 1:
        parts.append(f"multi-step {config.num_scheduler_steps}")
    if config.async_scheduling and not started.v0:
        parts.append("async scheduling")
    if setup.offline:
        parts.append("offline (no API server)")
    return ", ".join(parts)


def _facts(memory: MemoryEstimate, version: Version, scheduler: Scheduler,
           loop: EngineLoop, engine: str) -> SimFacts:
    return SimFacts(
        kv_cache_tokens=memory.kv_cache_tokens,
        num_blocks=memory.num_blocks,
        max_concurrency=memory.max_concurrency,
        kv_log_line=memory.log_line(version),
        peak_kv_usage=scheduler.pool.peak_used / max(1, memory.num_blocks),
        preemptions=scheduler.preemptions,
        prefix_cache_queries=scheduler.prefix_queries,
        prefix_cache_hits=scheduler.prefix_hits,
        steps=loop.steps,
        compute_bound_steps=loop.compute_bound_steps,
        mean_batch=loop.batch_sum / loop.steps if loop.steps else 0.0,
        spec_draft_tokens=loop.spec_draft_tokens,
        spec_accepted_tokens=loop.spec_accepted_tokens,
        engine=engine,
        max_batch=loop.max_batch,
        max_step_tokens=loop.max_step_tokens,
        busy_share=loop.busy_share,
    )
