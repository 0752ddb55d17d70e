"""The scheduler mirror and the simulated clock, on hand-checkable cases (a linear step model
with fixed step times)."""

from __future__ import annotations

import dataclasses

import pytest
from packaging.version import Version

from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.backends.sim.cost import LinearStepModel
from sweetspot.backends.sim.frontend import CHAT_INTAKE_S
from sweetspot.metrics.serve import compute_result
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import Request

STEP = LinearStepModel((0.010, 0.0, 0.0, 0.0), 0.0)  # every step 10 ms, no front end
ARCH = load_model("llama-3.1-8b").arch


def setup(**config) -> SimSetup:
    return SimSetup(load_hardware("h100"), ARCH, ARCH.default_quantization(),
                    ServingConfig(**config), Version("0.33.0"))


def req(i: int, prompt: int, output: int, at: float = 0.0, priority: int = 0,
        prefix: tuple[int, ...] = ()) -> Request:
    ids = prefix + tuple(1000 + 7 * i + j for j in range(prompt - len(prefix)))
    return Request(i, at, ids, output, priority)


def test_one_request_takes_one_step_per_token() -> None:
    run = simulate(setup(), [req(0, 100, 10)], model=STEP, warmup=0)
    (record,) = run.records
    assert record.ok and record.output_tokens == 10 and len(record.chunk_times_s) == 10
    assert record.ttft_s == pytest.approx(0.010)  # the whole prompt in the first step
    assert record.e2el_s == pytest.approx(0.100)
    assert record.tpot_s == pytest.approx(0.010)


def test_long_prompt_is_prefilled_in_chunks_of_the_token_budget() -> None:
    run = simulate(setup(max_num_batched_tokens=2048), [req(0, 5000, 2)], model=STEP, warmup=0)
    assert run.records[0].ttft_s == pytest.approx(0.030)  # 2048 + 2048 + 904 tokens


def test_max_num_seqs_caps_the_batch() -> None:
    requests = [req(i, 50, 20) for i in range(8)]
    run = simulate(setup(max_num_seqs=2), requests, model=STEP, warmup=0)
    assert all(r.ok and r.output_tokens == 20 for r in run.records)
    assert run.facts.mean_batch <= 2
    ends = sorted(r.end_s for r in run.records)
    assert ends[-1] == pytest.approx(4 * 0.200)  # four waves of two, 20 steps each


def test_preemption_when_blocks_run_out_and_every_request_still_finishes() -> None:
    # 64 blocks of 16 tokens; 8 requests that each grow to 300 tokens need 152 blocks.
    config = {"kv_cache_memory_bytes": 64 * 16 * ARCH.kv_bytes_per_token(), "max_model_len": 1024}
    requests = [req(i, 100, 200) for i in range(8)]
    run = simulate(setup(**config), requests, model=STEP, warmup=0)
    assert run.status == "ok" and run.facts.num_blocks == 64
    assert run.facts.preemptions > 0
    assert all(r.ok and r.output_tokens == 200 for r in run.records)
    assert run.facts.peak_kv_usage == pytest.approx(1.0)


def test_prefix_cache_hits_are_full_blocks_of_the_shared_prefix() -> None:
    prefix = tuple(range(500, 500 + 64))  # four full blocks
    requests = [req(0, 100, 5, prefix=prefix), req(1, 100, 5, at=1.0, prefix=prefix)]
    run = simulate(setup(), requests, model=STEP, warmup=0)
    assert run.facts.prefix_cache_hits == 64
    assert run.facts.prefix_cache_queries == 200
    off = simulate(setup(enable_prefix_caching=False), requests, model=STEP, warmup=0)
    assert off.facts.prefix_cache_hits == 0


def test_priority_admits_the_lower_value_first() -> None:
    requests = [req(i, 50, 10, priority=10) for i in range(4)] + [req(4, 50, 10, priority=0)]
    fcfs = simulate(setup(max_num_seqs=1), requests, model=STEP, warmup=0)
    prio = simulate(setup(max_num_seqs=1, scheduling_policy="priority"), requests, model=STEP,
                    warmup=0)
    assert fcfs.records[4].ttft_s > prio.records[4].ttft_s
    assert prio.records[4].ttft_s == pytest.approx(0.010)


def test_requests_longer_than_max_model_len_fail_like_vllm() -> None:
    run = simulate(setup(max_model_len=128), [req(0, 100, 50), req(1, 50, 10)], model=STEP,
                   warmup=0)
    bad, good = run.records
    assert not bad.ok and "maximum context length is 128" in bad.error
    assert good.ok


def test_concurrency_limit_holds_requests_until_a_slot_frees() -> None:
    requests = [req(i, 50, 10) for i in range(4)]
    run = simulate(setup(), requests, max_concurrency=1, model=STEP, warmup=0)
    sends = [r.sent_s for r in run.records]
    assert sends == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert run.records[3].slot_wait_s == pytest.approx(0.3)


def test_speculation_emits_several_tokens_per_chunk_and_exact_lengths() -> None:
    spec = SpeculativeConfig("ngram", 4, prompt_lookup_max=4)
    requests = [req(i, 100, 200) for i in range(4)]
    run = simulate(dataclasses.replace(setup(speculative=spec), spec_acceptance=0.7), requests,
                   model=STEP, warmup=0, seed=3)
    assert all(r.output_tokens == 200 for r in run.records)
    assert len(run.records[0].chunk_times_s) < 120  # ~2.8 tokens per step on average
    assert run.facts.spec_acceptance_rate == pytest.approx(0.7 * (1 - 0.7**4) / (1 - 0.7) / 4,
                                                           rel=0.15)


def test_same_seed_same_records() -> None:
    spec = SpeculativeConfig("ngram", 3)
    requests = [req(i, 80, 60, at=i * 0.01) for i in range(20)]
    a = simulate(setup(speculative=spec), requests, seed=7)
    b = simulate(setup(speculative=spec), requests, seed=7)
    assert a.records == b.records


def test_startup_failures_are_trials_with_vllms_words() -> None:
    oom = simulate(setup(gpu_memory_utilization=0.15), [req(0, 10, 2)])
    assert oom.status == "oom" and "No available memory for the cache blocks" in oom.cause
    too_long = simulate(setup(kv_cache_memory_bytes=1 * GiB, max_model_len=131072),
                        [req(0, 10, 2)])
    assert too_long.status == "oom" and "max seq len (131072)" in too_long.cause
    invalid = simulate(setup(max_num_seqs=512, max_num_batched_tokens=256), [req(0, 10, 2)])
    assert invalid.status == "invalid" and invalid.records == ()


def test_kv_capacity_is_printed_as_vllm_prints_it() -> None:
    run = simulate(setup(), [req(0, 10, 2)])
    assert run.facts.kv_log_line.startswith("GPU KV cache size: ")
    assert f"{run.facts.kv_cache_tokens:,} tokens" in run.facts.kv_log_line


def test_records_feed_the_shared_metrics_function() -> None:
    run = simulate(setup(), [req(i, 64, 32, at=i * 0.05) for i in range(10)])
    result = compute_result(run.records)
    assert result.completed == 10 and result.total_output_tokens == 320


def test_v0_releases_run_the_v0_engine_single_step_unless_multi_step_is_set() -> None:
    """0.6/0.7: V0 (whole prompts, prefill-only steps); from 0.8 V1, V0 again with multi-step."""
    requests = [req(i, 300, 20) for i in range(4)]

    def engine(version: str, **config) -> str:
        run = simulate(dataclasses.replace(setup(**config), version=Version(version)), requests,
                       warmup=0)
        return run.facts.engine

    assert engine("0.6.3") == "V0"
    assert engine("0.6.3", num_scheduler_steps=8) == "V0, multi-step 8"
    assert engine("0.8.0") == "V1"
    assert engine("0.8.0", num_scheduler_steps=8) == "V0, multi-step 8"
    assert engine("0.24.0") == "V1, async scheduling"
    # V0 runs the four prompts in one prefill-only step, then decodes: 1 + 19 steps.
    v0 = dataclasses.replace(setup(max_model_len=8192), version=Version("0.6.3"))
    run = simulate(v0, requests, model=STEP, warmup=0)
    assert run.facts.steps == 20
    assert all(r.ttft_s == pytest.approx(0.010) for r in run.records)
    # Over 32K of context V0 chunks prefills by default, 512 tokens a step (1,200 in 3 steps).
    run = simulate(dataclasses.replace(v0, config=ServingConfig()), requests, model=STEP,
                   warmup=0)
    assert run.config.max_num_batched_tokens == 512 and run.facts.steps == 22


def test_offline_has_no_front_end() -> None:
    """--offline (LLM.generate): no HTTP latency, no serial intake; the same engine steps."""
    front = LinearStepModel((0.010, 0.0, 0.0, 0.0), request_latency_s=0.020,
                            request_intake_s=0.005)
    requests = [req(i, 100, 10) for i in range(4)]
    online = simulate(setup(), requests, model=front, warmup=0)
    offline = simulate(dataclasses.replace(setup(), offline=True), requests, model=front,
                       warmup=0)
    assert [r.ttft_s for r in offline.records] == pytest.approx([0.010] * 4)
    # Online: half the latency each way, and the API server takes the four one at a time
    # (done at 15, 20, 25 and 30 ms); the first request's token, out of the engine at 25 ms,
    # is streamed after the last intake: 30 + 10 ms.
    assert online.records[0].ttft_s == pytest.approx(0.040)
    assert offline.facts.engine.endswith("offline (no API server)")


def test_from_0_19_a_request_waits_until_its_whole_prompt_fits() -> None:
    """vLLM's scheduler_reserve_full_isl (0.19+): a waiting request is admitted only when its
    whole prompt fits the free blocks, not just its first chunk; before, the first chunk was
    admitted and the prefill preempted the running request for the rest."""
    config = {"kv_cache_memory_bytes": 200 * 16 * ARCH.kv_bytes_per_token(),
              "max_model_len": 3072, "max_num_batched_tokens": 512}
    requests = [req(0, 2400, 200), req(1, 2400, 10)]  # 150 blocks each, 200 in the pool

    def run(version: str):
        return simulate(dataclasses.replace(setup(**config), version=Version(version)),
                        requests, model=STEP, warmup=0)

    new, old = run("0.19.0"), run("0.18.0")
    assert new.facts.preemptions == 0 and old.facts.preemptions > 0
    first, second = sorted(new.records, key=lambda r: r.request_id)
    assert second.ttft_s > first.end_s  # it waited for the first one's blocks


def test_v0_multi_step_streams_a_runs_tokens_in_one_message() -> None:
    """vLLM 0.6 multi-step: a run's tokens reach the client only after its last step, so ITL is
    the run's length in steps (LambdaLabs' 0.6.0 H100 table: median ITL 243.8 ms at TPOT
    25.6 ms with 10 steps); TPOT is unchanged. One request, 1 prefill step + 20 decode steps:
    the first token from the prefill, then runs of 8, 8 and 4 steps."""
    v0 = dataclasses.replace(setup(max_model_len=8192, num_scheduler_steps=8),
                             version=Version("0.6.3"))
    (record,) = simulate(v0, [req(0, 300, 21)], model=STEP, warmup=0).records
    assert record.output_tokens == 21
    assert record.chunk_times_s == pytest.approx((0.010, 0.090, 0.170, 0.210))
    assert record.tpot_s == pytest.approx(0.010)


def test_a_burst_of_chat_requests_waits_for_the_api_server_to_take_them_all() -> None:
    """The API server takes one request at a time, and its event loop streams an output only
    after the intakes that were ready before it: 400 chat requests at once (a rendered chat
    template each) all see their first token after the last intake, as gpustack's 1,000
    chat requests to vLLM 0.11 did (mean TTFT 18 s of a 22.7 s run)."""
    front = LinearStepModel((0.010, 0.0, 0.0, 0.0), request_latency_s=0.0,
                            request_intake_s=0.002)
    requests = [req(i, 100, 4) for i in range(400)]

    def ttfts(endpoint: str) -> list[float]:
        run = simulate(dataclasses.replace(setup(), endpoint=endpoint), requests, model=front,
                       warmup=0)
        return sorted(r.ttft_s for r in run.records)

    intake = 0.002 + CHAT_INTAKE_S
    chat = ttfts("chat")
    assert chat[0] == pytest.approx(400 * intake, rel=0.01)  # even the first request's
    assert chat[-1] < 400 * intake + 0.05
    completions = ttfts("completions")
    assert completions[-1] < chat[0] / 3


def test_a_burst_reaches_the_engine_after_the_api_server_took_it_all_in() -> None:
    """vLLM's API server runs the handlers of requests that arrive together round-robin: the
    first request, come alone, reaches the engine after its own intake (2 ms); the other 99
    only once all of them are taken in (200 ms), together: the engine idles meanwhile, then
    runs them in one step. The pre-V1 engine's fit keeps one request at a time."""
    front = LinearStepModel((0.010, 0.0, 0.0, 0.0), request_latency_s=0.0,
                            request_intake_s=0.002)
    requests = [req(i, 50, 2) for i in range(100)]  # 99 x 50 tokens: one step's budget
    run = simulate(setup(), requests, model=front, warmup=0)
    steps_before = sorted(r.chunk_times_s[0] for r in run.records)
    assert steps_before[0] == pytest.approx(0.200)  # its token waited behind the intakes
    assert steps_before[1] == pytest.approx(0.210)  # one step for all 99, once they are in
    assert steps_before[-1] == pytest.approx(0.210)
    v0 = dataclasses.replace(setup(max_model_len=8192), version=Version("0.6.3"))
    one_by_one = simulate(v0, requests, model=front, warmup=0)
    assert one_by_one.facts.steps > run.facts.steps


@pytest.mark.parametrize(("async_scheduling", "ttft"), [(False, 0.040), (True, 0.050)])
def test_async_scheduling_frees_a_finished_requests_slot_one_pass_late(
        async_scheduling: bool, ttft: float) -> None:
    """Two slots: A finishes in step 3 while B runs on. In sync mode C is admitted to step 4;
    with async scheduling step 4 is scheduled before step 3's outputs are processed, so A still
    holds its slot and C starts in step 5 (vLLM's async scheduler)."""
    requests = [req(0, 50, 3), req(1, 50, 20), req(2, 50, 2)]
    run = simulate(setup(max_num_seqs=2, async_scheduling=async_scheduling), requests,
                   model=STEP, warmup=0)
    a, b, c = run.records
    assert a.end_s == pytest.approx(0.030) and b.ok
    assert c.ttft_s == pytest.approx(ttft)


def test_a_fresh_server_without_warm_up_pays_its_start_up_on_the_first_step() -> None:
    """vLLM 0.24 compiles a Triton kernel at its first request: a run with no warm-up on a
    fresh server waits for it, one with a warm-up (or on a server that served before) not."""
    requests = [req(i, 100, 4) for i in range(4)]
    runs = {(warmup, fresh): simulate(
        SimSetup(load_hardware("h100"), ARCH, ARCH.default_quantization(), ServingConfig(),
                 Version("0.24.0")), requests, warmup=warmup, fresh=fresh)
            for warmup, fresh in ((0, True), (1, True), (0, False))}
    first = {k: min(r.ttft_s for r in run.records) for k, run in runs.items()}
    assert first[(0, True)] - first[(0, False)] == pytest.approx(0.6, abs=0.01)
    assert first[(1, True)] == pytest.approx(first[(0, False)], abs=0.01)
    old = SimSetup(load_hardware("h100"), ARCH, ARCH.default_quantization(), ServingConfig(),
                   Version("0.10.1"))  # not measured before 0.14: no transient
    assert min(r.ttft_s for r in simulate(old, requests, warmup=0).records) < 0.2
