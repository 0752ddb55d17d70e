"""A window from two scrapes: deltas, rates, states (down, restarted, slow), and the checks
against an envelope (SLOs, tuned P99s, capacity, queue, preemptions) and the tuned traffic."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sweetspot.guard.baseline import Envelope
from sweetspot.guard.checks import check_window
from sweetspot.guard.drift import TunedTraffic, check_drift, live_workload
from sweetspot.guard.scrape import Scrape
from sweetspot.guard.window import measure_window
from sweetspot.metrics.prometheus import parse_metrics
from sweetspot.testing.mock_engine import TOKEN_BUCKETS, TTFT_BUCKETS_S

LABELS = 'model_name="m",engine="0"'


def _hist(name: str, bounds: Sequence[float], values: Sequence[float]) -> str:
    lines = [f"# TYPE {name} histogram"]
    for bound in (*bounds, float("inf")):
        le = "+Inf" if bound == float("inf") else repr(float(bound))
        lines.append(f'{name}_bucket{{{LABELS},le="{le}"}} {sum(v <= bound for v in values)}')
    lines += [f"{name}_count{{{LABELS}}} {len(values)}", f"{name}_sum{{{LABELS}}} {sum(values)}"]
    return "\n".join(lines)


def _scrape(taken_s: float, *, ttft: Sequence[float] = (), prompts: Sequence[float] = (),
            outputs: Sequence[float] = (), preemptions: int = 0, running: int = 0,
            waiting: int = 0, kv: float = 0.1, started: float = 1000.0,
            elapsed_s: float = 0.01) -> Scrape:
    text = "\n".join([
        "# TYPE vllm:request_success_total counter",
        f"vllm:request_success_total{{{LABELS}}} {len(ttft)}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{{{LABELS}}} {preemptions}",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{LABELS}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{LABELS}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{LABELS}}} {kv}",
        "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {started}",
        _hist("vllm:time_to_first_token_seconds", TTFT_BUCKETS_S, ttft),
        _hist("vllm:request_prompt_tokens", TOKEN_BUCKETS, prompts),
        _hist("vllm:request_generation_tokens", TOKEN_BUCKETS, outputs),
    ]) + "\n"
    return Scrape(taken_s, elapsed_s, parse_metrics(text))


def _window(base: Scrape, after: Scrape, **kw):
    return measure_window(1, base.taken_s, base, after, slow_scrape_s=2.0, **kw)


def test_window_is_the_delta_between_two_scrapes() -> None:
    old = [0.03] * 100  # before the window: fast
    new = [0.03] * 50 + [0.3] * 50  # in the window: half of them slow
    base = _scrape(100.0, ttft=old, running=2)
    after = _scrape(110.0, ttft=old + new, running=4, waiting=6, kv=0.5)
    w = _window(base, after)
    assert w.state == "ok" and w.requests == 100
    assert w.request_rate == pytest.approx(10.0)
    assert w.arrival_rate == pytest.approx((100 + 10 - 2) / 10)  # finished + in-flight growth
    ttft = w.latencies["ttft"]
    assert ttft.count == 100
    assert 0.25 < ttft.p99_s <= 0.5  # the slow half's bucket, not diluted by the old 100
    assert 0.02 < ttft.p50_s <= 0.04
    assert (w.kv_usage, w.running, w.waiting) == (0.5, 4, 6)


def test_down_restarted_and_slow_are_states() -> None:
    base = _scrape(100.0, ttft=[0.05] * 40)
    down = Scrape(115.0, 10.0, None, "cannot reach http://x/metrics: refused")
    assert _window(base, down).state == "server down"
    # a new process: counted from zero, so its 5 requests are this window's
    again = _scrape(130.0, ttft=[0.05] * 5, started=2000.0)
    w = measure_window(3, 115.0, base, again, slow_scrape_s=2.0)
    assert w.state == "restarted" and w.requests == 5 and w.latencies["ttft"].count == 5
    # no process start time, but the counters went back: restarted all the same
    reset = _scrape(130.0, ttft=[0.05] * 5)
    assert _window(base, reset).state == "restarted"
    slow = _scrape(110.0, ttft=[0.05] * 45, elapsed_s=3.5)
    assert _window(base, slow).state == "slow scrape"
    assert _window(base, _scrape(110.0, ttft=[0.05] * 40)).state == "idle"


def test_checks_against_the_envelope() -> None:
    envelope = Envelope(source="t", measured=True, slos={"p99_ttft_ms": 200.0},
                        p99_ms={"ttft": 40.0}, capacity_rps=3.0, max_num_seqs=4,
                        preemptions_per_s=0.0)
    base = _scrape(100.0)
    ok = _window(base, _scrape(110.0, ttft=[0.03] * 20))
    assert check_window(ok, envelope) == []
    bad = _window(base, _scrape(110.0, ttft=[0.03] * 10 + [0.6] * 30, preemptions=3,
                                running=4, waiting=8, kv=0.97))
    kinds = [a.kind for a in check_window(bad, envelope)]
    assert kinds[:2] == ["slo", "capacity"]  # critical first
    assert set(kinds) == {"slo", "capacity", "preemptions", "kv cache", "queue"}
    # no SLO: a P99 beyond twice the tuned one is a warning
    tuned_only = Envelope(source="t", measured=True, p99_ms={"ttft": 40.0})
    assert [a.kind for a in check_window(bad, tuned_only)] == [
        "tuned p99", "preemptions", "kv cache", "queue"]
    # below the histogram's resolution: 0.8 ms reads "up to 1 ms", no news against 0.3 ms
    fine = _window(base, _scrape(110.0, ttft=[0.0008] * 20))
    assert check_window(fine, Envelope(source="t", measured=True, p99_ms={"ttft": 0.3})) == []
    few = _window(base, _scrape(110.0, ttft=[0.9] * 3))  # 3 requests: latencies not judged
    assert check_window(few, envelope) == []


def test_drift_and_the_live_workload() -> None:
    tuned = TunedTraffic("short", prompt_p50=256, prompt_p90=436, output_p50=150,
                         output_p90=200, rate=20.0)
    base = _scrape(100.0)
    same = _window(base, _scrape(110.0, ttft=[0.05] * 30, prompts=[250] * 15 + [400] * 15,
                                 outputs=[150] * 30))
    assert check_drift(same, tuned) == []
    long = _window(base, _scrape(110.0, ttft=[0.05] * 30, prompts=[4000] * 30,
                                 outputs=[300] * 30))
    alerts = check_drift(long, tuned)
    assert {a.kind for a in alerts} == {"drift"}
    assert any("P90 prompt" in a.message for a in alerts)
    data = live_workload(long.prompt_histogram, long.output_histogram, 3.0, "http://x")
    assert data is not None
    assert data["prompt"]["median"] == pytest.approx(4000, rel=0.02)
    assert data["arrival"] == {"process": "poisson", "rate": 3.0}
