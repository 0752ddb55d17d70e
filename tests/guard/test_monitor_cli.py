"""`sweetspot monitor` as a user runs it, against the mock server: bad inputs, one window,
an outage and a restart, and drift from the traffic a study was tuned on."""

from __future__ import annotations

import functools
import http.server
import json
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sweetspot.guard.baseline import load_baseline
from sweetspot.spec.loaders import load_workload
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload, workload_stats
from sweetspot.testing.mock_server import MockServerConfig, start_mock_server
from tests.conftest import run_cli

MONITOR = [sys.executable, "-m", "sweetspot.cli", "monitor"]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _windows(path: Path) -> list[dict]:
    return [r for r in _records(path) if r["type"] == "window"]


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def plain_http(tmp_path: Path) -> Iterator[str]:
    """A web server that is not vLLM: /metrics is someone else's Prometheus text."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "metrics").write_text("# TYPE up gauge\nup 1\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "site"))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


def _one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_inputs_end_with_one_line_and_exit_2(tmp_path: Path, plain_http: str) -> None:
    _one_line_exit_2(run_cli("monitor"), "needs --url")
    # nothing listens there: a typo'd URL is bad input, not an endless "server down" watch
    _one_line_exit_2(run_cli("monitor", "--url", "http://127.0.0.1:9", "--once"),
                     "cannot reach")
    _one_line_exit_2(run_cli("monitor", "--url", plain_http, "--once"), "no vLLM metrics")
    _one_line_exit_2(run_cli("monitor", "--url", plain_http + "/elsewhere", "--once"),
                     "HTTP 404")
    bad = tmp_path / "bad.json"
    bad.write_text('{"completed": 3}')
    _one_line_exit_2(run_cli("monitor", "--url", plain_http, "--baseline", str(bad)),
                     "malformed baseline")


def test_once_watches_one_window_and_ctrl_c_prints_the_summary(tmp_path: Path) -> None:
    with start_mock_server(MockServerConfig()) as url:
        done = run_cli("monitor", "--url", url, "--once", "--interval", "0.5", "--jsonl",
                       str(tmp_path / "once.jsonl"))
        assert done.returncode == 0, done.stderr
        (window,) = _windows(tmp_path / "once.jsonl")
        assert window["state"] == "idle" and window["alerts"] == []
        assert 0.4 < window["end"] - window["start"] < 2.0
        jsonl = tmp_path / "watch.jsonl"
        watch = subprocess.Popen([*MONITOR, "--url", url, "--interval", "0.3", "--jsonl",
                                  str(jsonl)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        _wait_for(lambda: len(_windows(jsonl)) >= 3)
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    assert "watched " in out and "alerts: none" in out, out
    assert _records(jsonl)[-1]["type"] == "summary"


def test_an_outage_is_server_down_and_the_restart_is_noticed(tmp_path: Path) -> None:
    jsonl = tmp_path / "watch.jsonl"
    config = MockServerConfig()
    with start_mock_server(config) as url:
        port = int(url.rsplit(":", 1)[1])
        watch = subprocess.Popen([*MONITOR, "--url", url, "--interval", "0.5", "--windows", "60",
                                  "--jsonl", str(jsonl)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: len(_windows(jsonl)) >= 2)
    _wait_for(lambda: any(w["state"] == "server down" for w in _windows(jsonl)))
    with start_mock_server(config, port=port):
        _wait_for(lambda: any(w["state"] == "restarted" for w in _windows(jsonl)))
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 1, err  # the outage and the restart were alerts
    states = [w["state"] for w in _windows(jsonl)]
    down, back = states.index("server down"), states.index("restarted")
    assert down < back and set(states[down:back]) == {"server down"}, states
    alerts = {a["kind"] for w in _windows(jsonl) for a in w["alerts"]}
    assert {"server down", "restarted"} <= alerts
    summary = _records(jsonl)[-1]
    assert summary["type"] == "summary" and summary["states"]["restarted"] == 1
    assert "server down" in out and "restarted" in out


@pytest.fixture(scope="module")
def short_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A study tuned on the simulator for `short` traffic: (storage URL, study name)."""
    folder = tmp_path_factory.mktemp("study")
    storage = f"sqlite:///{folder / 'studies.db'}"
    done = run_cli("tune", "--model", "qwen2.5-0.5b", "--quant", "bf16", "--gpu", "a100-80gb",
                   "--workload", "short", "--num-requests", "24", "--confirm", "0",
                   "--vllm-version", "0.33.0", "--trials", "3", "--study-name", "short",
                   "--storage", storage, "--report-dir", str(folder / "report"))
    assert done.returncode == 0, done.stderr + done.stdout
    return storage, "short"


def test_a_study_pick_is_an_envelope(short_study: tuple[str, str]) -> None:
    storage, name = short_study
    envelope = load_baseline(f"{name}:max-throughput", storage)
    assert not envelope.measured and envelope.capacity_rps and envelope.p99_ms["ttft"] > 0
    assert envelope.workload is not None and envelope.workload["name"] == "short"
    assert envelope.command is not None and envelope.command.startswith("vllm serve")
    assert load_baseline(f"{name}:baseline", storage).command is None


def _sent_lengths(result: dict) -> tuple[np.ndarray, np.ndarray]:
    """The lengths the bench client sent: its requests drawn again from its seed."""
    described = result["sweetspot"]
    spec = validate_workload(described["workload_spec"], "of the bench result")
    requests = sample_requests(spec, described["num_requests"], seed=described["seed"],
                               vocab_size=described["vocab_size"])
    return (np.array([len(r.prompt_token_ids) for r in requests]),
            np.array([r.output_tokens for r in requests]))


def test_long_traffic_on_a_server_tuned_for_short_is_drift_and_becomes_a_workload(
        tmp_path: Path, short_study: tuple[str, str]) -> None:
    storage, name = short_study
    jsonl, live, result = tmp_path / "w.jsonl", tmp_path / "live.yaml", tmp_path / "bench.json"
    config = MockServerConfig(ttft_s=0.01, itl_s=0.0005, tokens_per_chunk=16)
    with start_mock_server(config) as url:
        watch = subprocess.Popen(
            [*MONITOR, "--url", url, "--baseline", f"{name}:max-throughput", "--storage",
             storage, "--interval", "1", "--windows", "60", "--jsonl", str(jsonl),
             "--write-workload", str(live)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        _wait_for(lambda: len(_windows(jsonl)) >= 1)
        bench = run_cli("bench", "--url", url, "--workload", "long", "--num-requests", "300",
                        "--rate", "60", "--warmup", "0", "--json", str(result))
        assert bench.returncode == 0, bench.stderr
        time.sleep(2.5)
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 1, err
    windows = _windows(jsonl)
    first = next(w["window"] for w in windows if w["requests"])
    drifted = [w["window"] for w in windows if any(a["kind"] == "drift" for a in w["alerts"])]
    assert drifted and drifted[0] <= first + 1, (first, drifted)
    assert "drift: " in out and f"wrote {live}" in out
    prompts, outputs = _sent_lengths(json.loads(result.read_text()))
    stats = workload_stats(load_workload(str(live)), n=20_000)
    for sent, written in ((prompts, stats.prompt), (outputs, stats.output)):
        for q, value in ((50, written.p50), (90, written.p90)):
            true = float(np.percentile(sent, q))
            assert abs(value / true - 1) < 0.10, (q, value, true)


def test_a_study_pick_exports_rules_their_tests_and_a_dashboard_offline(
        short_study: tuple[str, str], promtool: Path, tmp_path: Path) -> None:
    storage, name = short_study
    rules, tests, dash = tmp_path / "rules.yml", tmp_path / "rules_test.yml", tmp_path / "d.json"
    done = run_cli("monitor", "--baseline", f"{name}:max-throughput", "--storage", storage,
                   "--emit-rules", str(rules), "--emit-rule-tests", str(tests),
                   "--emit-dashboard", str(dash), "--selector", 'job="prod-vllm"', "--for", "2m")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "VLLMServerDown" in done.stdout and "Grafana dashboard" in done.stdout
    text = rules.read_text()
    assert 'job="prod-vllm"' in text and "for: 2m" in text
    for args in (("check", "rules", str(rules)), ("test", "rules", str(tests))):
        checked = subprocess.run([str(promtool), *args], capture_output=True, text=True,
                                 timeout=120)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    panels = json.loads(dash.read_text())["panels"]
    assert any(p["title"].startswith("Time to first token") for p in panels)


def test_exports_need_a_baseline_and_rule_tests_need_the_rules(tmp_path: Path) -> None:
    _one_line_exit_2(run_cli("monitor", "--emit-rules", str(tmp_path / "r.yml")), "--baseline")
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"completed": 1}))
    _one_line_exit_2(run_cli("monitor", "--baseline", str(result), "--emit-rule-tests",
                             str(tmp_path / "t.yml")), "--emit-rules")
    assert not (tmp_path / "r.yml").exists()
