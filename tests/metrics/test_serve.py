import dataclasses
import json
import math
import random
import statistics

import numpy as np
import pytest
from packaging.version import Version

import sweetspot.metrics
from sweetspot import SweetspotError
from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim import SimSetup, simulate
from sweetspot.backends.step_times import StepTimes
from sweetspot.metrics import BenchResult, compute_result
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.requests import Request

VLLM_KEYS = [
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
]


def make_records(seed: int = 7, n: int = 300) -> list[RequestRecord]:
    """Irregular, seeded traffic with every kind of request the metrics must tell apart."""
    rng = random.Random(seed)
    records, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(20.0)
        lag = rng.choice([0.0, rng.uniform(0, 0.002), rng.expovariate(100.0)])
        sent = t + lag
        n_chunks = rng.randint(2, 60)
        times, c = [], sent + rng.lognormvariate(-2.5, 0.8)
        for _ in range(n_chunks):
            times.append(c)
            c += rng.choice([rng.expovariate(60), rng.uniform(0, 1e-4), rng.lognormvariate(-4, 1)])
        per_chunk = [rng.choice([1, 1, 2, 3]) if rng.random() < 0.3 else 1 for _ in times]
        output, end, error = sum(per_chunk), times[-1], None
        kind = rng.random()
        if kind < 0.08:  # HTTP error before any chunk
            times, end, error = [], None, "HTTP 503"
        elif kind < 0.13:  # disconnected mid-stream
            times, end, error = times[: rng.randint(1, n_chunks)], None, "disconnected"
        elif kind < 0.15:  # stream that never carried choices: vLLM marks it failed
            times, end = [], sent + 0.3
        elif kind < 0.17:  # error reported although an end was recorded
            error = "timeout"
        elif kind < 0.23:  # one token
            times, output = times[:1], 1
        elif kind < 0.27:  # one chunk carrying several tokens
            times, output = times[:1], 4
        elif kind < 0.32:  # no usage in the stream: the chunk count stands in
            output = 0
        elif kind < 0.36:  # usage disagrees with the chunk count the other way
            output = n_chunks - 1
        if end is not None and times:
            end = times[-1]
        records.append(RequestRecord(
            request_id=i, scheduled_s=t, sent_s=sent, chunk_times_s=tuple(times), end_s=end,
            prompt_tokens=rng.randint(10, 2000), output_tokens=output, error=error,
        ))
    return records


def reference_result(records, percentiles, slos_ms):
    """bench-metrics.md's prose (and vLLM's peak loops) in plain Python, sharing no code."""

    def pct(xs, p):  # linear interpolation between closest ranks, numpy's default
        xs = sorted(xs)
        h = (len(xs) - 1) * p / 100
        lo = math.floor(h)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (h - lo) * (xs[hi] - xs[lo])

    def summary(name, xs):
        xs = xs or [0.0]  # vLLM summarises an empty list as 0
        out = {
            f"mean_{name}_ms": statistics.fmean(xs) * 1000,
            f"median_{name}_ms": statistics.median(xs) * 1000,
            f"std_{name}_ms": statistics.pstdev(xs) * 1000,
        }
        for p in percentiles:
            out[f"p{p:g}_{name}_ms"] = pct(xs, p) * 1000
        return out

    duration = 0.0
    for r in records:
        duration = max(duration, r.sent_s, *r.chunk_times_s)
        if r.end_s is not None:
            duration = max(duration, r.end_s)
    good = [r for r in records if r.error is None and r.end_s is not None and r.chunk_times_s]
    ttfts, tpots, itls, e2els, outputs, good_count = [], [], [], [], [], 0
    for r in good:
        ttft = r.chunk_times_s[0] - r.sent_s
        e2el = r.chunk_times_s[-1] - r.sent_s
        out = r.output_tokens or len(r.chunk_times_s)
        tpot = 0.0
        if out > 1:
            tpot = (e2el - ttft) / (out - 1)
            tpots.append(tpot)
        for a, b in zip(r.chunk_times_s, r.chunk_times_s[1:], strict=False):
            itls.append(b - a)
        ttfts.append(ttft)
        e2els.append(e2el)
        outputs.append(out)
        ok = True
        for name, value in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
            if name in slos_ms and value * 1000 > slos_ms[name]:
                ok = False
        good_count += ok

    tokens_per_s, active_per_s = {}, {}
    if good:
        t0 = min(r.sent_s for r in good)
        n_buckets = math.ceil(max(r.chunk_times_s[-1] for r in good) - t0) + 1
        for r in good:
            for c in r.chunk_times_s:
                if 0 <= int(c - t0) < n_buckets:
                    tokens_per_s[int(c - t0)] = tokens_per_s.get(int(c - t0), 0) + 1
            for s in range(int(r.sent_s - t0), int(r.chunk_times_s[-1] - t0) + 1):
                active_per_s[s] = active_per_s.get(s, 0) + 1

    total_in = sum(r.prompt_tokens for r in good)
    lags = [r.sent_s - r.scheduled_s for r in records] or [0.0]
    expected = {
        "duration": duration,
        "completed": len(good),
        "failed": len(records) - len(good),
        "total_input_tokens": total_in,
        "total_output_tokens": sum(outputs),
        "request_throughput": len(good) / duration,
        "request_goodput": good_count / duration if slos_ms else None,
        "output_throughput": sum(outputs) / duration,
        "total_token_throughput": (total_in + sum(outputs)) / duration,
        "max_output_tokens_per_s": max(tokens_per_s.values(), default=0),
        "max_concurrent_requests": max(active_per_s.values(), default=0),
    }
    for name, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        expected |= summary(name, xs)
    expected["mean_client_lag_ms"] = statistics.fmean(lags) * 1000
    expected["p99_client_lag_ms"] = pct(lags, 99) * 1000
    expected["max_client_lag_ms"] = max(lags) * 1000
    expected["goodput_slos_ms"] = dict(slos_ms)
    return expected


@pytest.mark.parametrize("seed", [7, 11])
def test_matches_an_independent_reading_of_the_definitions(seed):
    records = make_records(seed)
    slos = {"ttft": 150.0, "tpot": 20.0, "e2el": 1500.0}
    got = compute_result(records, slos=slos, percentiles=(50, 90, 95, 99, 99.9)).to_dict()
    expected = reference_result(records, (50, 90, 95, 99, 99.9), slos)
    assert list(got) == list(expected)
    assert got.pop("goodput_slos_ms") == expected.pop("goodput_slos_ms") == slos
    assert got == pytest.approx(expected, rel=1e-9)
    kinds = {r.error for r in records}
    assert {None, "HTTP 503", "disconnected", "timeout"} <= kinds  # every kind was generated
    assert 0 < got["request_goodput"] < got["request_throughput"]


def test_key_names_are_vllms():
    got = compute_result(make_records(3, 40)).to_dict()
    latency_keys = [
        f"{stat}_{name}_ms"
        for name in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99")
    ]
    extras = ["mean_client_lag_ms", "p99_client_lag_ms", "max_client_lag_ms", "goodput_slos_ms"]
    assert list(got) == VLLM_KEYS + latency_keys + extras
    assert got["request_goodput"] is None  # as vLLM without --goodput


def record(i, sent, chunks, output, *, scheduled=None, error=None, end="last"):
    end_s = chunks[-1] if end == "last" and chunks else end if end != "last" else None
    return RequestRecord(
        request_id=i, scheduled_s=sent if scheduled is None else scheduled, sent_s=sent,
        chunk_times_s=tuple(chunks), end_s=end_s, prompt_tokens=100, output_tokens=output,
        error=error,
    )


def test_goodput_counts_requests_within_every_slo():
    records = [
        record(0, 0.0, [0.1, 0.2, 0.3], 3),  # ttft 100 ms (on the limit), tpot 100 ms
        record(1, 0.0, [0.2, 0.3], 2),  # ttft 200 ms: too slow
        record(2, 0.0, [0.05, 0.5], 2),  # tpot 450 ms: too slow
        record(3, 0.0, [0.08], 1),  # one token: tpot counts as 0
        record(4, 0.0, [0.01], 5, error="HTTP 500"),  # failed: never good
    ]
    result = compute_result(records, duration_s=2.0, slos={"ttft": 100, "tpot": 100})
    assert result.request_goodput == pytest.approx(2 / 2.0)  # requests 0 and 3
    assert result.slos_ms == (("ttft", 100.0), ("tpot", 100.0))
    assert compute_result(records, duration_s=2.0, slos={"e2el": 250}).request_goodput == 0.5
    assert compute_result(records, duration_s=2.0, slos={}).request_goodput is None
    assert result.tpot.mean_ms == pytest.approx((100 + 100 + 450) / 3)  # one-token left out


def test_peaks_count_chunks_per_second_bucket_and_active_requests():
    records = [
        record(0, 0.5, [0.6, 0.7, 0.8, 1.2], 8),  # buckets 0,0,0,0 then 0 (from t0 = 0.5)
        record(1, 1.0, [1.4, 1.6, 2.7], 3),  # buckets 0, 1, 2 from t0
        record(2, 2.6, [2.7, 2.8], 2),  # buckets 2, 2
    ]
    result = compute_result(records)
    assert result.max_output_tokens_per_s == 5.0  # chunks, not tokens: request 0 has 8 tokens
    assert result.max_concurrent_requests == 2
    assert result.duration_s == 2.8
    assert result.total_output_tokens == 13


def test_empty_and_all_failed_runs_do_not_crash():
    empty = compute_result([])
    assert (empty.completed, empty.failed, empty.duration_s) == (0, 0, 0.0)
    assert empty.request_throughput == 0.0 and empty.ttft.mean_ms == 0.0
    assert empty.max_concurrent_requests == 0

    failed = [
        record(0, 0.0, [], 0, error="HTTP 503"),
        record(1, 0.5, [0.9, 1.4], 0, error="disconnected", end=None),
        record(2, 1.6, [], 0, end=None, error="refused"),
    ]
    result = compute_result(failed, slos={"ttft": 100})
    assert (result.completed, result.failed) == (0, 3)
    assert result.duration_s == 1.6  # the last send; a failed stream's last chunk came earlier
    assert result.request_goodput == 0.0 and result.total_output_tokens == 0
    assert result.e2el.percentiles_ms == ((50.0, 0.0), (90.0, 0.0), (95.0, 0.0), (99.0, 0.0))


def test_output_tokens_fall_back_to_the_chunk_count():
    result = compute_result([record(0, 0.0, [0.1, 0.2, 0.3], 0)], duration_s=1.0)
    assert result.total_output_tokens == 3
    assert result.tpot.mean_ms == pytest.approx(100.0)


def test_explicit_duration_is_used():
    result = compute_result([record(0, 0.0, [0.1, 0.2], 2)], duration_s=4.0)
    assert result.duration_s == 4.0
    assert result.output_throughput == 0.5


def test_client_lag_is_actual_minus_scheduled_send():
    records = [record(0, 0.010, [0.1], 1, scheduled=0.0), record(1, 1.0, [1.1], 1)]
    result = compute_result(records)
    assert result.mean_client_lag_ms == pytest.approx(5.0)
    assert result.max_client_lag_ms == pytest.approx(10.0)


def test_round_trips_through_json():
    result = compute_result(
        make_records(5, 80), percentiles=(25, 99.9), slos={"e2el": 900, "ttft": 120}
    )
    loaded = BenchResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert loaded == result
    assert loaded.percentiles == (25.0, 99.9)
    with pytest.raises(SweetspotError, match="mean_ttft_ms"):
        BenchResult.from_dict({k: v for k, v in result.to_dict().items() if k != "mean_ttft_ms"})


def test_percentiles_choose_the_keys():
    got = compute_result(make_records(1, 30), percentiles=(99.9, 25, 25)).to_dict()
    assert {k for k in got if k.endswith("_ttft_ms") and k.startswith("p")} == {
        "p99.9_ttft_ms", "p25_ttft_ms",
    }
    assert "p99_ttft_ms" not in got
    none = compute_result(make_records(1, 30), percentiles=()).to_dict()
    assert [k for k in none if k.startswith("p")] == ["p99_client_lag_ms"]
    with pytest.raises(SweetspotError):
        compute_result([], percentiles=(101,))


@pytest.mark.parametrize("slos", [{"latency": 100}, {"ttft": -1}, {"tpot": "fast"}])
def test_bad_slos_are_one_line_errors(slos):
    with pytest.raises(SweetspotError) as info:
        compute_result(make_records(1, 5), slos=slos)
    assert "\n" not in str(info.value)
    if "latency" in slos:
        assert str(info.value) == "unknown SLO 'latency': use ttft, tpot or e2el (ms)"


def test_public_names_are_exported_and_sorted():
    names = sweetspot.metrics.__all__
    assert all(hasattr(sweetspot.metrics, name) for name in names)
    constants = [n for n in names if n.isupper()]
    classes = [n for n in names if n[0].isupper() and not n.isupper()]
    functions = [n for n in names if n[0].islower()]
    assert names == sorted(constants) + sorted(classes) + sorted(functions)


def _as_plain(record: RequestRecord) -> RequestRecord:
    return dataclasses.replace(record, chunk_times_s=tuple(record.chunk_times_s))


@pytest.mark.parametrize("kv_mib", [None, 48])
def test_simulated_token_times_summarise_as_their_written_out_tuples(kv_mib):
    """The simulator's records share one array of decode-step times (``StepTimes``): counted
    per step they give the numbers the same times written out give -- percentiles and medians
    bit for bit, means and deviations to rounding -- with and without preemption (whose
    records are plain tuples among them)."""
    arch = load_model("qwen2.5-0.5b").arch
    config = ServingConfig(max_num_seqs=64, max_model_len=2048,
                           kv_cache_memory_bytes=None if kv_mib is None else kv_mib << 20)
    setup = SimSetup(load_hardware("a100-80gb"), arch, load_quantization("bf16"), config,
                     Version("0.24.0"))
    rng = np.random.default_rng(3)
    requests = [Request(i, 0.0, tuple(range(int(n))), int(m)) for i, (n, m) in enumerate(
        zip(rng.integers(8, 900, 400), rng.integers(1, 300, 400), strict=True))]
    run = simulate(setup, requests)
    assert run.status == "ok"
    kinds = {type(r.chunk_times_s) for r in run.records}
    assert StepTimes in kinds and tuple in kinds  # one-token answers, preempted requests
    assert (run.facts.preemptions > 0) == (kv_mib is not None)
    counted = compute_result(run.records, percentiles=(0, 25, 50, 90, 99.9, 100)).to_dict()
    written = compute_result([_as_plain(r) for r in run.records],
                             percentiles=(0, 25, 50, 90, 99.9, 100)).to_dict()
    assert counted.keys() == written.keys()
    for key, value in written.items():
        if key.startswith(("mean_itl", "std_itl")):
            assert counted[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert counted[key] == value, key
