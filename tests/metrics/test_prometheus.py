import pytest

from sweetspot import SweetspotError
from sweetspot.metrics import (
    ServerQuantiles,
    compute_server_facts,
    histogram_quantile,
    parse_metrics,
)

# Shaped like vLLM 0.3x's /metrics (prometheus_client output), two engines of one model.
# TTFT window (after − before, summed over engines): cumulative 10, 50, 80, 95, 100.
# ITL window (one engine): cumulative 200, 700, 900, 1000, 1000.
BEFORE = """\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="qwen"} 1.0
vllm:num_preemptions_total{engine="1",model_name="qwen"} 2.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="qwen"} 1.7654321e+09
vllm:num_preemptions_created{engine="1",model_name="qwen"} 1.7654321e+09
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 500.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 100.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 50.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 2000.0
vllm:prompt_tokens_total{engine="1",model_name="qwen"} 1000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 500.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 500.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen"} 5.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="qwen"} 4.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="qwen"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen"} 100.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 150.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen"} 150.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 0.0
vllm:num_requests_running{engine="1",model_name="qwen"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.1
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.05
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="qwen"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="qwen"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 0.61
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="qwen"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.25",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="qwen"} 1.02
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="qwen"} 1.7654321e+09
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="qwen"} 50.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="qwen"} 100.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="qwen"} 120.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="qwen"} 130.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 130.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="qwen"} 130.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="qwen"} 2.5
"""

AFTER = (
    BEFORE.replace('num_preemptions_total{engine="0",model_name="qwen"} 1.0',
                   'num_preemptions_total{engine="0",model_name="qwen"} 4.0')
    .replace('num_preemptions_total{engine="1",model_name="qwen"} 2.0',
             'num_preemptions_total{engine="1",model_name="qwen"} 6.0')
    .replace("queries_total{engine=\"0\",model_name=\"qwen\"} 1000.0",
             "queries_total{engine=\"0\",model_name=\"qwen\"} 5000.0")
    .replace("queries_total{engine=\"1\",model_name=\"qwen\"} 500.0",
             "queries_total{engine=\"1\",model_name=\"qwen\"} 2500.0")
    .replace("hits_total{engine=\"0\",model_name=\"qwen\"} 100.0",
             "hits_total{engine=\"0\",model_name=\"qwen\"} 1650.0")
    .replace("hits_total{engine=\"1\",model_name=\"qwen\"} 50.0",
             "hits_total{engine=\"1\",model_name=\"qwen\"} 1500.0")
)
AFTER = AFTER.split("# HELP vllm:prompt_tokens_total")[0] + """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 8000.0
vllm:prompt_tokens_total{engine="1",model_name="qwen"} 4000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 3000.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 2000.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen"} 25.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen"} 3.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="qwen"} 20.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="qwen"} 2.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 400.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen"} 300.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 1200.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen"} 900.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 750.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen"} 450.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 0.0
vllm:num_requests_running{engine="1",model_name="qwen"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.0
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen"} 8.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="qwen"} 33.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="qwen"} 54.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="qwen"} 64.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 66.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 66.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 22.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="qwen"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.25",model_name="qwen"} 22.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="qwen"} 32.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="qwen"} 38.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="qwen"} 41.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="qwen"} 41.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="qwen"} 15.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="qwen"} 250.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="qwen"} 800.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="qwen"} 1020.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="qwen"} 1130.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 1130.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="qwen"} 1130.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="qwen"} 30.0
"""


def during(kv: tuple[float, float], waiting: tuple[int, int], running: tuple[int, int]) -> str:
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge"]
    lines += [f'vllm:kv_cache_usage_perc{{engine="{e}"}} {v}' for e, v in enumerate(kv)]
    lines.append("# TYPE vllm:num_requests_waiting gauge")
    lines += [f'vllm:num_requests_waiting{{engine="{e}"}} {v}' for e, v in enumerate(waiting)]
    lines.append("# TYPE vllm:num_requests_running gauge")
    lines += [f'vllm:num_requests_running{{engine="{e}"}} {v}' for e, v in enumerate(running)]
    return "\n".join(lines) + "\n"


SAMPLES = [during((0.42, 0.37), (3, 4), (10, 12)), during((0.35, 0.61), (6, 5), (8, 9))]


def test_snapshot_sums_label_sets_and_drops_total():
    snap = parse_metrics(BEFORE)
    assert snap.counter("vllm:num_preemptions") == 3.0
    assert snap.counter("vllm:num_preemptions_total") == 3.0
    assert snap.counter("vllm:request_success") == 10.0  # engines × finished reasons
    assert snap.gauge("vllm:kv_cache_usage_perc") == pytest.approx(0.15)
    assert snap.gauge("vllm:kv_cache_usage_perc", peak=True) == 0.1
    ttft = snap.histogram("vllm:time_to_first_token_seconds")
    assert ttft.buckets == ((0.1, 3.0), (0.25, 5.0), (0.5, 6.0), (1.0, 7.0), (float("inf"), 7.0))
    assert (ttft.count, ttft.sum) == (7.0, pytest.approx(1.63))
    assert not any(name.endswith("_created") for name in snap.gauges)


def test_facts_over_the_run():
    facts = compute_server_facts(
        parse_metrics(BEFORE), parse_metrics(AFTER), [parse_metrics(s) for s in SAMPLES]
    )
    assert facts.preemptions == 7
    assert facts.prefix_cache_hit_rate == pytest.approx(3000 / 6000)
    assert (facts.prompt_tokens, facts.generation_tokens) == (9000, 4000)
    assert facts.requests_succeeded == 40
    assert facts.spec_acceptance_rate == pytest.approx(900 / 1500)
    assert facts.spec_acceptance_length == pytest.approx(1 + 900 / 500)
    assert facts.peak_kv_cache_usage == 0.61  # the fullest engine, not a sum over engines
    assert (facts.max_requests_waiting, facts.max_requests_running) == (11, 22)
    # TTFT window 10, 50, 80, 95, 100: p50 at the top of (0.1, 0.25]; p90 10 of 15 into
    # (0.5, 1.0]; p99 in the +Inf bucket, so the highest finite bound.
    assert facts.ttft == ServerQuantiles(
        p50_s=pytest.approx(0.25), p90_s=pytest.approx(0.5 + 0.5 * 10 / 15), p99_s=1.0, count=100
    )
    # ITL window 200, 700, 900, 1000: p50 300 of 500 into (0.01, 0.025], p90 at 0.05,
    # p99 90 of 100 into (0.05, 0.1].
    assert facts.itl == ServerQuantiles(
        p50_s=pytest.approx(0.019), p90_s=pytest.approx(0.05), p99_s=pytest.approx(0.095),
        count=1000,
    )
    assert facts.e2el is None and facts.queue_time is None  # not exported here


def test_old_metric_names_and_untyped_text():
    old = """\
vllm:gpu_cache_usage_perc{model_name="m"} 0.73
vllm:num_preemptions_total{model_name="m"} 5
vllm:time_per_output_token_seconds_bucket{le="0.02",model_name="m"} {a}
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} {b}
vllm:time_per_output_token_seconds_count{model_name="m"} {b}
vllm:time_per_output_token_seconds_sum{model_name="m"} 1.5
"""
    before = parse_metrics(old.replace("{a}", "0").replace("{b}", "0"))
    after = parse_metrics(old.replace("{a}", "40").replace("{b}", "50"))
    hist = after.histogram("vllm:time_per_output_token_seconds")
    assert (hist.count, hist.sum) == (50.0, 1.5)
    assert "vllm:time_per_output_token_seconds_count" not in after.gauges
    facts = compute_server_facts(before, after)
    assert facts.peak_kv_cache_usage == 0.73
    assert facts.preemptions == 0
    assert facts.itl.p50_s == pytest.approx(0.02 * 25 / 40)
    assert facts.itl.p99_s == 0.02  # in the +Inf bucket
    assert facts.max_requests_waiting is None  # no samples taken


def test_missing_metrics_and_restarts_give_none():
    empty = compute_server_facts(parse_metrics(""), parse_metrics(""))
    assert all(getattr(empty, name) is None for name in empty.__slots__)
    # After a restart every counter is lower than before: no deltas, no quantiles.
    restarted = compute_server_facts(parse_metrics(AFTER), parse_metrics(BEFORE))
    assert restarted.preemptions is None and restarted.ttft is None
    assert restarted.prefix_cache_hit_rate is None
    # No spec decoding, no prefix-cache queries in the window: None, not a division by zero.
    idle = compute_server_facts(parse_metrics(BEFORE), parse_metrics(BEFORE))
    assert idle.prefix_cache_hit_rate is None and idle.spec_acceptance_rate is None
    assert idle.spec_acceptance_length is None and idle.ttft is None
    assert idle.preemptions == 0


@pytest.mark.parametrize(
    "text", ["<html><body>502 Bad Gateway</body></html>", "404 page not found", "vllm:x{a=1} 2"]
)
def test_garbage_is_a_one_line_error(text):
    with pytest.raises(SweetspotError, match="not Prometheus metrics text") as info:
        parse_metrics(text)
    assert "\n" not in str(info.value)


def test_histogram_quantile_follows_prometheus():
    inf = float("inf")
    buckets = [(1.0, 10.0), (2.0, 20.0), (inf, 20.0)]
    assert histogram_quantile(0.5, buckets) == 1.0
    assert histogram_quantile(0.75, buckets) == 1.5
    assert histogram_quantile(0.25, list(reversed(buckets))) == 0.5  # order does not matter
    assert histogram_quantile(0.5, [(1.0, 10.0), (2.0, 20.0)]) is None  # no +Inf bucket
    assert histogram_quantile(0.5, [(1.0, 0.0), (inf, 0.0)]) is None  # no observations
    assert histogram_quantile(0.5, [(-1.0, 5.0), (inf, 10.0)]) == -1.0  # lowest bound ≤ 0
    assert histogram_quantile(0.5, [(1.0, 10.0), (2.0, 8.0), (inf, 20.0)]) == 1.0  # monotonic
