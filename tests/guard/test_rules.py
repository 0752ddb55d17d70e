"""The Prometheus rules export: the release's metric names, the envelope's thresholds, alerts
left out (with why) where the envelope has no number. promtool's verdicts: test_promtool.py."""

from __future__ import annotations

import re

import pytest
import yaml

from sweetspot._errors import SweetspotError
from sweetspot.guard.rules import (
    RuleOptions,
    prometheus_rules,
    render_rules,
    seconds,
    write_rules,
)
from sweetspot.metrics.prometheus import metric_names
from tests.guard.envelopes import FULL, OLD, SPARSE, STATS

ALWAYS = {"VLLMServerDown", "VLLMRestarted"}


def test_metric_names_follow_the_release():
    new, old, older = metric_names("0.32.0"), metric_names("0.10.1"), metric_names("0.9.1")
    assert (new.kv_usage, new.itl, new.tpot) == (
        "vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds")
    assert (old.kv_usage, old.itl, old.tpot) == (
        "vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds", None)
    assert older.kv_usage == "vllm:gpu_cache_usage_perc"
    current = metric_names(None)
    assert (current.kv_usage, current.itl, current.tpot, current.release) == (
        new.kv_usage, new.itl, new.tpot, None)
    with pytest.raises(SweetspotError, match="not a vLLM version"):
        metric_names("latest")


def _parsed(text: str) -> dict[str, dict]:
    rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    return {r.get("alert") or r["record"]: r for r in rules}


def test_alerts_hold_the_envelopes_numbers():
    text = render_rules(prometheus_rules(FULL))
    rules = _parsed(text)
    alerts = {name: r for name, r in rules.items() if "alert" in r}
    assert set(alerts) == ALWAYS | {
        "VLLMTTFTP99AboveSLO", "VLLMTPOTP99AboveSLO", "VLLMPreemptionsAboveTuned",
        "VLLMKVCacheAboveTuned", "VLLMQueueBeyondBatch", "VLLMRequestRateAboveCapacity"}
    ttft = alerts["VLLMTTFTP99AboveSLO"]
    assert ttft["expr"] == "job_instance_model_name:vllm_ttft_seconds:p99_rate5m > 0.3"
    assert ttft["labels"] == {"severity": "critical"} and ttft["for"] == "5m"
    assert "300 ms" in ttft["annotations"]["summary"]
    assert "212 ms" in ttft["annotations"]["description"]  # what the pick measured
    assert FULL.source in ttft["annotations"]["description"]
    assert alerts["VLLMTPOTP99AboveSLO"]["expr"].endswith(":vllm_tpot_seconds:p99_rate5m > 0.05")
    assert alerts["VLLMPreemptionsAboveTuned"]["expr"].endswith("> 0.25")
    assert alerts["VLLMKVCacheAboveTuned"]["expr"].endswith(":vllm_kv_cache_usage:max > 0.72")
    assert alerts["VLLMQueueBeyondBatch"]["expr"].endswith(":vllm_requests_waiting:sum > 128")
    assert alerts["VLLMRequestRateAboveCapacity"]["expr"].endswith(
        ":vllm_requests_arrived:rate5m > 10.0")
    assert alerts["VLLMServerDown"]["expr"] == 'up{job="vllm"} == 0'
    summaries = {name: r["annotations"]["summary"] for name, r in alerts.items()}
    for name, number in [("VLLMPreemptionsAboveTuned", "0.25/s"), ("VLLMKVCacheAboveTuned", "72%"),
                         ("VLLMQueueBeyondBatch", "128"),
                         ("VLLMRequestRateAboveCapacity", "10/s")]:
        assert number in summaries[name], summaries[name]  # the threshold, and whence
        assert "tuned" in summaries[name] or "max-num-seqs" in summaries[name]
    assert "Left out" not in text


def test_recording_rules_use_the_releases_names_and_keep_the_operators_labels():
    rules = _parsed(render_rules(prometheus_rules(FULL)))
    p99 = rules["job_instance_model_name:vllm_ttft_seconds:p99_rate5m"]["expr"]
    assert p99 == ("histogram_quantile(0.99, sum by (le, job, instance, model_name) "
                   '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[5m])))')
    for stat in ("ttft", "itl", "tpot", "e2el", "queue_time"):
        for q in ("p50", "p99"):
            assert f"job_instance_model_name:vllm_{stat}_seconds:{q}_rate5m" in rules
    exprs = " ".join(r["expr"] for r in rules.values())
    for name in ("vllm:inter_token_latency_seconds_bucket", "vllm:kv_cache_usage_perc",
                 "vllm:request_time_per_output_token_seconds_bucket", "vllm:num_preemptions_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:request_success_total", "vllm:num_requests_waiting",
                 "vllm:request_queue_time_seconds_bucket", "process_start_time_seconds"):
        assert f'{name}{{job="vllm"}}' in exprs, name
    assert "gpu_cache_usage" not in exprs and "time_per_output_token_seconds_bucket{" not in \
        exprs.replace("request_time_per_output_token", "")


def test_a_missing_number_leaves_its_alert_out_and_the_file_says_why():
    rules = prometheus_rules(SPARSE)
    assert {a.name for a in rules.alerts} == ALWAYS
    text = render_rules(rules)
    header = [line for line in text.splitlines() if line.startswith("#")]
    for name, why in [("the SLO alerts", "no SLO"),
                      ("VLLMPreemptionsAboveTuned", "no preemption rate"),
                      ("VLLMKVCacheAboveTuned", "no peak KV-cache usage"),
                      ("VLLMQueueBeyondBatch", "no max_num_seqs"),
                      ("VLLMRequestRateAboveCapacity", "no capacity")]:
        assert any(line.startswith(f"#   {name}: ") and why in line for line in header), name
    alerts = [r for r in _parsed(text).values() if "alert" in r]
    # No invented threshold: the alerts left compare with 0 only.
    assert {float(x) for r in alerts for x in re.findall(r"[><=]=? (\d+\.?\d*)", r["expr"])} == {0}


def test_an_older_release_gets_its_own_names_and_no_tpot_alert():
    rules = prometheus_rules(OLD)
    names = {a.name for a in rules.alerts}
    assert "VLLMTPOTP99AboveSLO" not in names and "VLLMITLP99AboveSLO" in names
    assert dict(rules.left_out)["VLLMTPOTP99AboveSLO"].startswith("vLLM 0.10.1 exports no TPOT")
    assert "filled its KV cache" in dict(rules.left_out)["VLLMKVCacheAboveTuned"]
    exprs = " ".join(r.expr for r in rules.recording)
    assert "vllm:time_per_output_token_seconds_bucket" in exprs
    assert "inter_token_latency" not in exprs and "vllm_tpot" not in exprs
    mean = next(r for r in rules.recording if r.name.endswith("ttft_seconds:mean_rate5m"))
    assert mean.expr == ('sum by (job, instance, model_name) (rate(vllm:time_to_first_token_'
                         'seconds_sum{job="vllm"}[5m])) / sum by (job, instance, model_name) '
                         '(rate(vllm:time_to_first_token_seconds_count{job="vllm"}[5m]))')
    preempt = next(a for a in rules.alerts if a.name == "VLLMPreemptionsAboveTuned")
    assert preempt.expr.endswith("> 0.0")  # none seen at the tuned load: any is more


def test_every_slo_statistic_gets_its_own_recording():
    rules = prometheus_rules(STATS)
    alerts = {a.name: a for a in rules.alerts}
    assert alerts["VLLMTTFTP99_9AboveSLO"].expr.endswith(":vllm_ttft_seconds:p99_9_rate5m > 0.9")
    assert alerts["VLLME2ELMedianAboveSLO"].expr.endswith(":vllm_e2el_seconds:p50_rate5m > 2.5")
    assert alerts["VLLMITLMeanAboveSLO"].expr.endswith(":vllm_itl_seconds:mean_rate5m > 0.035")
    assert alerts["VLLMTPOTP90AboveSLO"].expr.endswith(":vllm_tpot_seconds:p90_rate5m > 0.04")
    recorded = {r.name: r.expr for r in rules.recording}
    assert recorded["job_instance_model_name:vllm_ttft_seconds:p99_9_rate5m"].startswith(
        "histogram_quantile(0.999, ")
    assert "1800 ms" in alerts["VLLME2ELMedianAboveSLO"].annotations["description"]


def test_options_choose_selector_labels_and_patience():
    options = RuleOptions(selector='namespace="prod", job="vllm"', target_labels=("instance",),
                          model_label=None, rate_window="1m", for_="10m", interval="30s")
    text = render_rules(prometheus_rules(FULL, options))
    groups = yaml.safe_load(text)["groups"]
    assert [g["interval"] for g in groups] == ["30s", "30s"]
    rules = _parsed(text)
    assert rules["instance:vllm_ttft_seconds:p99_rate1m"]["expr"] == (
        "histogram_quantile(0.99, sum by (le, instance) (rate(vllm:time_to_first_token_seconds"
        '_bucket{namespace="prod", job="vllm"}[1m])))')
    assert rules["VLLMQueueBeyondBatch"]["for"] == "10m"
    with pytest.raises(SweetspotError, match="not a Prometheus duration"):
        RuleOptions(for_="five minutes")
    with pytest.raises(SweetspotError, match="matchers inside"):
        RuleOptions(selector='{job="vllm"}')
    assert seconds("1h30m") == 5400 and seconds("500ms") == 0.5


def test_write_rules_writes_the_rendered_file_whole(tmp_path):
    path = tmp_path / "rules.yml"
    rules = write_rules(path, FULL)
    assert path.read_text() == render_rules(rules)
    assert [p.name for p in tmp_path.iterdir()] == ["rules.yml"]  # no temporary file left
