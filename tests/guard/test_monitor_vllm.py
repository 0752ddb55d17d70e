"""`sweetspot monitor` beside a real vLLM server (CPU build, tiny dummy model) under load from
sweetspot's load generator (the one `sweetspot bench` runs): each window's P99 TTFT against the
P99 the client measured for the requests whose first token came in that window; then the server
is stopped (``server down``) and started again on its port (``restarted``).

The client runs real-time (``bench --client-priority realtime``): beside a CPU-build server on
two busy cores an ordinary client went unscheduled for a fifth of a second while vLLM's own
TTFT read 60 ms (first run: one window's client P99 234 ms against the server's 60 ms)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from bisect import bisect_left
from pathlib import Path

import numpy as np
import pytest

from sweetspot.backends.loadgen import LoadConfig, run_load
from sweetspot.backends.vllm import launch_server
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import validate_workload
from sweetspot.testing.mock_engine import TTFT_BUCKETS_S
from sweetspot.testing.tiny_model import make_tiny_model

# As tests/backends/vllm/conftest.py: no compiled graph (its cache is keyed by the model path).
SERVER_ARGS = ("--enforce-eager",)
TRAFFIC = {"name": "probe", "prompt": {"kind": "uniform", "low": 16, "high": 256},
           "output": {"kind": "uniform", "low": 16, "high": 64},
           "arrival": {"process": "poisson", "rate": 6}}
INTERVAL_S = 2.0


def _windows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "window"]


def _wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _bucket(seconds: float) -> int:
    return bisect_left(TTFT_BUCKETS_S, seconds)


def _client_windows(windows: list[dict], first_token_s: list[float], ttft_s: list[float]
                    ) -> list[tuple[dict, float, int]]:
    """(window, client P99 TTFT, client requests) for each window with 5 or more requests."""
    out = []
    for w in windows:
        inside = [t for f, t in zip(first_token_s, ttft_s, strict=True)
                  if w["start"] < f <= w["end"]]
        if len(inside) >= 5 and "ttft" in w["latencies_ms"]:
            out.append((w, float(np.percentile(inside, 99)), len(inside)))
    return out


@pytest.mark.vllm
def test_windows_match_the_client_and_an_outage_and_restart_are_seen(
        tmp_path: Path, vllm_python: Path) -> None:
    tiny = make_tiny_model(tmp_path / "tiny")
    jsonl = tmp_path / "watch.jsonl"
    requests = sample_requests(validate_workload(TRAFFIC, "probe"), 90, seed=1, vocab_size=4096)
    with launch_server(vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                       args=SERVER_ARGS, log_path=tmp_path / "vllm.log",
                       dummy_weights=True) as handle:
        port = int(handle.base_url.rsplit(":", 1)[1])
        watch = subprocess.Popen(
            [sys.executable, "-m", "sweetspot.cli", "monitor", "--url", handle.base_url,
             "--interval", str(INTERVAL_S), "--windows", "200", "--jsonl", str(jsonl),
             "--log-file", str(tmp_path / "vllm.log")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: len(_windows(jsonl)) >= 1, 60)
        # The records' times count from the run's start, a few milliseconds after this.
        start_s = time.time()
        run = run_load(requests, LoadConfig(base_url=handle.base_url, model=str(tiny.model_dir),
                                            realtime=True))
        time.sleep(2 * INTERVAL_S + 0.5)  # the window of the last first token closes
    _wait_for(lambda: any(w["state"] == "server down" for w in _windows(jsonl)), 60)
    with launch_server(vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                       args=SERVER_ARGS, log_path=tmp_path / "vllm2.log", port=port,
                       dummy_weights=True):
        _wait_for(lambda: any(w["state"] == "restarted" for w in _windows(jsonl)), 60)
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=60)
    assert watch.returncode == 1, err  # down and restarted are alerts
    records = [r for r in run.records if r.ok and r.ttft_s is not None]
    assert len(records) == len(requests)
    first_token = [start_s + r.chunk_times_s[0] for r in records]
    compared = _client_windows(_windows(jsonl), first_token, [r.ttft_s for r in records])
    table = [(w["window"], w["latencies_ms"]["ttft"]["count"], count,
              w["latencies_ms"]["ttft"]["p99"], round(client_p99 * 1e3, 1), w["scrape_s"])
             for w, client_p99, count in compared]  # server n, client n, server/client P99 ms
    print("window, server n, client n, server P99 ms, client P99 ms, scrape s:", *table,
          sep="\n")
    assert len(compared) >= 3, _windows(jsonl)
    for window, client_p99, _ in compared:
        server_p99 = window["latencies_ms"]["ttft"]["p99"] / 1e3
        # within the histogram's resolution: the server's estimate and the client's value lie
        # in the same bucket or in neighbouring ones
        assert abs(_bucket(server_p99) - _bucket(client_p99)) <= 1, table
    states = [w["state"] for w in _windows(jsonl)]
    assert states.index("server down") < states.index("restarted"), states
    assert "watched " in out
