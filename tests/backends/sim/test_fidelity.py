"""The roofline simulator against every published measurement of public-cases.md (P1-P8) and
sweetspot's own runs (P9, P10: H100, vLLM 0.24, benchmarks/gpu/results-2026-12-07-issue22-h100;
P11: H200, vLLM 0.24, benchmarks/gpu/results-2026-12-02; P12-P15: H100, measured after the fits,
results-2026-12-07-issue22-h100-round2, -round3 and -round4).

Bounds from issue 22: median absolute error <= 8 % on throughputs and <= 12 % on latencies,
no case off by more than 1.5x. The item tests below hold the H100 runs each item is about; the
simulator before issue 22's kernel constants failed every one of them (prefill TTFT +40-85 %,
decode TPOT +12-14 %, saturated throughput -25-29 %, the closed loop's median TTFT +31 %).
"""

from __future__ import annotations

import statistics

import pytest
from packaging.version import Version

from sweetspot.backends.sim.cost import RooflineModel, StepShape, roofline_constants
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.model import load_model
from sweetspot.testing.public_cases import CASES, Outcome, run_case


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return [o for case in CASES for o in run_case(case)]


def test_every_public_case_is_encoded() -> None:
    assert [c.case_id for c in CASES] == [f"P{i}" for i in range(1, 16)]


@pytest.mark.parametrize(("kind", "bound"), [("throughput", 0.08), ("latency", 0.12)])
def test_median_absolute_error(outcomes: list[Outcome], kind: str, bound: float) -> None:
    errors = [abs(o.error) for o in outcomes if o.kind == kind]
    assert len(errors) >= 10
    assert statistics.median(errors) <= bound, sorted(errors)


def test_no_case_off_by_more_than_1_5x(outcomes: list[Outcome]) -> None:
    off = {(o.case_id, o.run, o.metric): round(o.factor, 2) for o in outcomes if o.factor > 1.5}
    assert not off, off


def _own(outcomes: list[Outcome], label_part: str, metric: str) -> list[Outcome]:
    picked = [o for o in outcomes if o.case_id in ("P9", "P10", "P11", "P12", "P13", "P14", "P15")
              and label_part in o.run
              and o.metric == metric]
    assert picked, (label_part, metric)
    return picked


def test_item3_prefill_time_by_prompt_length(outcomes: list[Outcome]) -> None:
    """One prompt at a time, 128 to 24,576 tokens (one to three 8,192-token chunks): TTFT is
    the prefill plus the front end; from 1K tokens the chunked prefill alone dominates."""
    rows = _own(outcomes, "-token prompt at a time", "median_ttft_ms")
    assert len(rows) == 8
    errors = {o.run: round(o.error, 3) for o in rows}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors
    long = [o for o in rows if int(o.run.split()[1].split("-")[0]) >= 1024]
    assert all(abs(o.error) <= 0.05 for o in long), errors


def test_item9_h100_decode_and_saturated_throughput(outcomes: list[Outcome]) -> None:
    """The same direction everywhere before: decode too slow at 1-32 sequences, saturated
    bursts and KV-bound runs too slow. Now decode within 5 %, throughputs within 10 %."""
    tpot = _own(outcomes, "256/256 closed loop", "median_tpot_ms")
    assert all(abs(o.error) <= 0.05 for o in tpot), [(o.run, o.error) for o in tpot]
    saturated = [*_own(outcomes, "random 2000/100", "request_throughput"),
                 *_own(outcomes, "random 4000/200", "request_throughput"),
                 *_own(outcomes, "shared", "request_throughput"),
                 *_own(outcomes, "512/256", "request_throughput")]
    assert len(saturated) >= 7
    assert all(abs(o.error) <= 0.10 for o in saturated), [(o.run, o.error) for o in saturated]


def test_item9_small_batch_decode_of_an_8b_and_a_14b_model(outcomes: list[Outcome]) -> None:
    """Decode at 1-32 sequences on the H100: a 14B shape (P9) and an 8B one (P15, and P8's
    published one-request ITLs up to 32k tokens of context) within 3 %. One share of the
    bandwidth fitted the 14B alone and left the 8B 5-6 % fast (P15 was predicted so); the
    weights at 0.88 beside 30 us a layer fit both."""
    rows = [*_own(outcomes, "256/256 closed loop", "median_tpot_ms"),
            *(o for o in outcomes if o.case_id == "P8" and not o.run.endswith("125000"))]
    assert len(rows) == 9
    assert all(abs(o.error) <= 0.03 for o in rows), [(o.case_id, o.run, o.error) for o in rows]


def test_item2_long_prompt_closed_loops(outcomes: list[Outcome]) -> None:
    """20,000-token prompts, 200 out, in closed loops of 4, 8 (an 8B model) and 16 (14B): no
    convoy doubling the median TTFT; it and the throughput within 15 %. The loop of 4 again on
    another host (P15) within 25 %: the real loop's slots drift together wave by wave (the
    second request of a wave sent 0.50, 0.23, 0.23, 0.22, 0.04 s after the first in P12's run,
    0.23, 0.03, 0.01, 0.01, 0.02 s in P15's; simulated 0.50 every wave), and a loop of 4's
    median TTFT falls between two slots' clusters."""
    for metric in ("median_ttft_ms", "request_throughput"):
        rows = _own(outcomes, "20000/200 closed loop of", metric)
        assert len(rows) == 4
        assert all(abs(o.error) <= (0.25 if o.case_id == "P15" else 0.15) for o in rows), [
            (o.case_id, o.run, metric, o.error) for o in rows]


def test_item3_token_budget_changes_prefill_little(outcomes: list[Outcome]) -> None:
    """2,048- and 16,384-token steps (P13): one 8,192-token prompt in four chunks or one, and
    saturated 4000/200 bursts: throughputs within 10 %, TTFTs within 12 %."""
    rows = [*_own(outcomes, "-token steps", "median_ttft_ms"),
            *_own(outcomes, "-token steps", "request_throughput")]
    assert len(rows) == 6
    off = [(o.run, o.metric, round(o.error, 3)) for o in rows
           if abs(o.error) > (0.10 if o.kind == "throughput" else 0.12)]
    assert not off, off


def test_item4_a_burst_reaches_the_engine_once_the_api_server_took_it_in(
        outcomes: list[Outcome]) -> None:
    """Bursts of 128-token prompts, 4 out (P9: 600 on a 14B shape; P12, P14: 150, 600 and 1,200
    on an 8B shape): vLLM 0.24's API server takes a burst in round-robin (~1 ms a request)
    before any of it reaches the engine, which then prefills 64 prompts a step. Taken in one at
    a time, the engine started on the first while the rest trickled in: +23 % and +35 % on P9
    and P12, +43 %, +32 % and +33 % on P14 (predicted before it ran). Within 15 % now, the
    600- and 1,200-request ones within 6 %."""
    rows = _own(outcomes, "random 128/4 x", "request_throughput")
    assert len(rows) == 5
    assert all(abs(o.error) <= 0.15 for o in rows), [(o.case_id, o.run, o.error) for o in rows]
    large = [o for o in rows if not o.run.endswith("x150")]
    assert all(abs(o.error) <= 0.06 for o in large), [(o.case_id, o.run, o.error) for o in large]


def test_item5_a_fresh_server_without_warm_up(outcomes: list[Outcome]) -> None:
    """500 ShareGPT requests at once on a server that had served nothing, no warm-up: its first
    step also JIT-compiles (the first request's token at 0.82 s, 0.18 s on the warm server),
    while the API server takes the rest of the burst in."""
    rows = _own(outcomes, "fresh server", "median_ttft_ms") + _own(
        outcomes, "fresh server", "request_throughput")
    assert all(abs(o.error) <= 0.10 for o in rows), [(o.metric, o.error) for o in rows]


def test_item6_an_over_subscribed_kv_cache(outcomes: list[Outcome]) -> None:
    """500 requests at once into an 8 GiB cache (~100 fit) against a closed loop of 64 that
    fits: both throughputs within 10 %, and the burst's gain over the loop (1.12x measured:
    larger batches outweigh the queue) within 5 %."""
    burst, = _own(outcomes, "KV over-subscribed", "request_throughput")
    loop, = _own(outcomes, "512/256 closed loop of 64", "request_throughput")
    assert abs(burst.error) <= 0.10 and abs(loop.error) <= 0.10
    gain = (burst.predicted / loop.predicted) / (burst.measured / loop.measured)
    assert abs(gain - 1) <= 0.05, gain


def test_item7_prefix_caching_gain_at_high_hit_rates(outcomes: list[Outcome]) -> None:
    """2,000-token prompts sharing 0, 1,000 or 1,800 tokens: each throughput within 10 % and
    the 90 %-hit gain over no sharing (4.95x measured) within 10 %."""
    rows = {o.run: o for o in _own(outcomes, "shared", "request_throughput")}
    assert all(abs(o.error) <= 0.10 for o in rows.values()), rows
    none, most = rows["2000/64 x200, 0 shared"], rows["2000/64 x200, 1800 shared"]
    gain = (most.predicted / none.predicted) / (most.measured / none.measured)
    assert abs(gain - 1) <= 0.10, gain


def test_item8_small_batch_decode_on_h200(outcomes: list[Outcome]) -> None:
    """16 sequences decoding on the H200: its weights stream at its own measured share of
    4.8 TB/s (0.79, not the H100's 0.88, which makes TPOT 8.4 % too fast): TPOT and
    throughput within 5 %. Not failing before this work (-1.6 % there): the issue's held-back
    H200 cases, 5-12 % too fast, are not like this run; the test guards the H200's own share."""
    rows = [*_own(outcomes, "16 sequences", "median_tpot_ms"),
            *_own(outcomes, "16 sequences", "output_throughput")]
    assert all(abs(o.error) <= 0.05 for o in rows), [(o.metric, o.error) for o in rows]


@pytest.mark.parametrize("release", ["0.6.3", "0.11.0"])
def test_item8_h200_decode_keeps_its_measured_pace_with_older_releases(release: str) -> None:
    """The H200 streams weights at a smaller share of its bandwidth than the H100 (P11's
    16-sequence TPOT, 5.07 ms: 0.79 of 4.8 TB/s against the H100's 0.88 of 3.35, beside 30 us
    a layer on both): the SMs' loads in flight, not the kernels of one release, set it. So a
    release before 0.14 (the older kernels fitted to the A100/H100 public cases) keeps the
    H200's pace relative to the H100: a 7B decoding 16 sequences is as much faster on the H200
    as with 0.24 (within 3 %: the two releases' per-layer times differ). The simulator before
    this gave older releases the H100's share on the H200 too: its small-batch decode came out
    12 % faster relative to the H100, the direction of issue 22's held-back H200 cases (5-12 %
    too fast at moderate load)."""
    arch = load_model("qwen2.5-7b").arch
    quant = arch.default_quantization()
    step = StepShape(num_seqs=16, num_decode_tokens=16, num_prefill_tokens=0, num_sampled=16,
                     decode_context=16 * 600, prefill_context=0, prefill_pairs=0.0)

    def pace(version: str) -> float:  # H200 step time over the H100's
        constants = roofline_constants(Version(version))
        h200, h100 = (RooflineModel(load_hardware(g), arch, quant, constants=constants)
                      .gpu_time(step)[0] for g in ("h200", "h100"))
        return h200 / h100

    assert pace(release) == pytest.approx(pace("0.24.0"), rel=0.03)
