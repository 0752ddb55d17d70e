"""compare --url-a --url-b against two CPU-build vLLM servers that differ in --max-num-seqs: the
verdict the simulator predicts for the same pair (issue 20's real-server check).

The ``heavy`` dummy model (its steps, not the client's work, take the CPU: RESULTS.md,
2026-12-04), fixed short lengths, 16 requests a run offered at 65 % of A's capacity, each
server warmed first, three to five pairs: 2.5 minutes on a 2-vCPU VM (2026-12-06: B 4.7, 5.1
and 4.2 times A, decided after three pairs, 99.7 % interval [+60 %, +1,260 %]). A first try
without the warm-up and with at most three pairs read B 2.5-4.3 times A, the first pair's A
slowest, and its t interval over three pairs still held zero.
One sequence at a time against eight serves a fraction of the tokens, which the simulator and
the servers agree on; the test holds the guarded throughput's verdict and the gate's exit code.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from sweetspot.backends.vllm import launch_server
from sweetspot.testing.tiny_model import TinyModel
from tests.backends.vllm import conftest as vllm_conftest
from tests.backends.vllm.conftest import SERVER_ARGS, assert_group_gone
from tests.conftest import run_cli
from tests.guard.conftest import compare_commands

heavy = vllm_conftest.heavy  # the real-server tests' session fixture, shared here
SEQS = (1, 8)  # A, B
OPTIONS = ["--num-requests", "16", "--vocab-size", "4096", "--tolerance", "throughput=5%",
           "--rate", "auto", "--min-repeats", "3", "--max-repeats", "5"]


def _workload(tmp_path: Path) -> Path:
    path = tmp_path / "wl.yaml"
    path.write_text("prompt: {kind: fixed, value: 32}\noutput: {kind: fixed, value: 32}\n"
                    "arrival: {process: poisson, rate: 4}\n")
    return path


@pytest.mark.vllm
@pytest.mark.serial  # a measured verdict: the other workers' load once made B's lead undecided
def test_two_servers_get_the_verdict_the_simulator_predicts(vllm_python: Path, heavy: TinyModel,
                                                            tmp_path: Path) -> None:
    workload = _workload(tmp_path)
    commands = [f"vllm serve {heavy.model_dir} --max-num-seqs {n} --enforce-eager" for n in SEQS]
    predicted = compare_commands(*commands, gpu="cpu", vllm_version="0.32.0",
                                 workload=str(workload), num_requests=16, rate="auto",
                                 tolerance="throughput=5%", min_repeats=3, max_repeats=5)
    expected = next(m.verdict for m in predicted.metrics if m.metric.key == "output_throughput")
    assert expected == "better"  # the pair is a clear one: 8 sequences serve more than 1
    out = tmp_path / "compare.json"
    with ExitStack() as stack:
        servers = [stack.enter_context(launch_server(
            vllm_python, heavy.model_dir, tokenizer_dir=heavy.tokenizer_dir,
            args=(*SERVER_ARGS, "--max-num-seqs", str(n)), dummy_weights=True,
            log_path=tmp_path / f"vllm{n}.log")) for n in SEQS]
        for server in servers:  # a fresh server's first batches run slower (RESULTS.md)
            warm = run_cli("bench", "--url", server.base_url, "--workload", str(workload),
                           "--num-requests", "16", "--concurrency", "8", "--vocab-size", "4096")
            assert warm.returncode == 0, warm.stderr
        done = run_cli("compare", "--url-a", servers[0].base_url, "--url-b",
                       servers[1].base_url, "--workload", str(workload), *OPTIONS,
                       "--json", str(out), "--fail-on-regression")
        pgids = [server.pid for server in servers]
    for pgid in pgids:
        assert_group_gone(pgid)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    measured = {m["key"]: m for m in data["metrics"]}
    assert measured["output_throughput"]["verdict"] == expected, data
    assert data["verdict"] == "better" and data["source"] == "endpoint"
    assert all(pair[0]["status"] == pair[1]["status"] == "ok" for pair in data["runs"])
