"""run_prometheus against Debian's binary, without vLLM: it loads the emitted rules, evaluates
them, scrapes a target that does not answer (so "server down" fires), and is gone afterwards —
also when the block raises."""

from __future__ import annotations

import os
import time

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.server import free_port
from sweetspot.guard.rules import write_rules
from sweetspot.testing.prometheus import run_prometheus
from tests.guard.envelopes import FULL, QUICK
from tests.prometheus_install import prometheus_binary  # noqa: F401 (the fixture)


def test_prometheus_evaluates_rules_and_stops(prometheus_binary, tmp_path):  # noqa: F811
    rules = write_rules(tmp_path / "rules.yml", FULL, QUICK)
    nothing_there = f"127.0.0.1:{free_port()}"
    with run_prometheus([nothing_there], tmp_path / "prom", rule_files=[tmp_path / "rules.yml"],
                        binary=str(prometheus_binary)) as prometheus:
        deadline = time.monotonic() + 60
        while True:
            firing = [a for a in prometheus.alerts() if a["state"] == "firing"]
            loaded = prometheus.rules()
            if firing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [a["labels"]["alertname"] for a in firing] == ["VLLMServerDown"]
        assert firing[0]["labels"]["instance"] == nothing_there
        assert {r["name"] for r in loaded} == {r.name for r in (*rules.recording, *rules.alerts)}
        assert all(r["health"] == "ok" for r in loaded), [r for r in loaded if r["health"] != "ok"]
        assert prometheus.query("up")[0]["value"][1] == "0"
    with pytest.raises(ProcessLookupError):
        os.kill(prometheus.pid, 0)


def test_prometheus_is_stopped_when_the_block_raises(prometheus_binary, tmp_path):  # noqa: F811
    with pytest.raises(RuntimeError), run_prometheus([], tmp_path,
                                                     binary=str(prometheus_binary)) as prometheus:
        raise RuntimeError("inside")
    with pytest.raises(ProcessLookupError):
        os.kill(prometheus.pid, 0)


def test_a_bad_config_is_a_clear_error(prometheus_binary, tmp_path):  # noqa: F811
    (tmp_path / "bad.yml").write_text("groups: [{name: x, rules: [{record: 'a b', expr: '1'}]}]")
    with pytest.raises(SweetspotError, match="Prometheus exited"), run_prometheus(
            [], tmp_path / "p", rule_files=[tmp_path / "bad.yml"],
            binary=str(prometheus_binary)):
        pass
