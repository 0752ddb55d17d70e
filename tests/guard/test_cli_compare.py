"""`sweetspot compare` on the command line: the rollout gate's exit codes, its files, and bad input
as one line with exit 2."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from sweetspot.cli import main
from tests.conftest import run_cli
from tests.guard.conftest import GPU, A, B


def _sim_args(workload: Path, *more: str) -> list[str]:
    return ["--gpu", GPU, "--workload", str(workload), "--num-requests", "60", *more]


def test_fail_on_regression_gates_a_rollout(fixed_workload, tmp_path):
    worse = run_cli("compare", B, A, *_sim_args(fixed_workload, "--fail-on-regression",
                                                "--json", str(tmp_path / "c.json"),
                                                "--markdown", str(tmp_path / "c.md")))
    assert worse.returncode == 1, worse.stderr
    assert "verdict: B is worse than A: a regression (Output throughput" in worse.stdout
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["verdict"] == "worse" and "Output throughput" in data["regressions"]
    summary = (tmp_path / "c.md").read_text()
    assert summary.startswith("### ❌ sweetspot compare: B is worse than A")
    assert "| Output throughput (tok/s) * |" in summary and f"`{A}`" in summary

    same = run_cli("compare", A, A, *_sim_args(fixed_workload, "--fail-on-regression"))
    assert same.returncode == 0, same.stderr
    assert "verdict: no significant difference" in same.stdout


def test_without_the_flag_a_regression_still_exits_0(fixed_workload):
    done = run_cli("compare", B, A, *_sim_args(fixed_workload, "--max-repeats", "4"))
    assert done.returncode == 0 and "B is worse than A" in done.stdout


class _NotVllm(BaseHTTPRequestHandler):
    def do_GET(self):  # the standard library's name
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def not_vllm():
    server = HTTPServer(("127.0.0.1", 0), _NotVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _one_error_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_bad_inputs_end_with_one_line_and_exit_2(capsys, tmp_path, not_vllm, fixed_workload):
    assert "compare needs two inputs" in _one_error_line(capsys, ["compare", A])
    assert "--url-a and --url-b go together" in _one_error_line(
        capsys, ["compare", "--url-a", not_vllm])
    assert "leave A and B out" in _one_error_line(
        capsys, ["compare", A, B, "--url-a", not_vllm, "--url-b", not_vllm])
    assert "cannot reach http://127.0.0.1:9" in _one_error_line(
        capsys, ["compare", "--url-a", "http://127.0.0.1:9", "--url-b", not_vllm])
    assert "answered HTTP 404" in _one_error_line(
        capsys, ["compare", "--url-a", not_vllm, "--url-b", not_vllm])
    assert "not a server URL" in _one_error_line(
        capsys, ["compare", "--url-a", "localhost:8000", "--url-b", not_vllm])
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not JSON" in _one_error_line(capsys, ["compare", str(broken), str(broken)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    assert "not a benchmark result" in _one_error_line(capsys, ["compare", str(other),
                                                                str(other)])
    assert "no such file" in _one_error_line(capsys, ["compare", str(tmp_path / "a.json"),
                                                      str(other)])
    assert "both be result files" in _one_error_line(capsys, ["compare", str(other), A])
    assert "--tolerance" in _one_error_line(capsys, ["compare", A, B, "--tolerance", "tpot=5"])
    assert "--min-repeats 4 is more than --max-repeats 2" in _one_error_line(
        capsys, ["compare", A, B, "--min-repeats", "4", "--max-repeats", "2"])
    assert "different models" in _one_error_line(
        capsys, ["compare", A, "vllm serve qwen2.5-14b --max-num-seqs 16"])
    assert "--speed-spread is the simulator's" in _one_error_line(
        capsys, ["compare", A, B, "--backend", "vllm", "--launch-template", "true {args}",
                 "--vllm-version", "0.32.0", "--speed-spread", "0.1"])
    assert "cannot split the command line" in _one_error_line(
        capsys, ["compare", A, "vllm serve 'qwen2.5-7b"])


def test_a_b_that_vllm_would_refuse_fails_the_gate_with_its_cause(fixed_workload):
    done = run_cli("compare", A, "vllm serve qwen2.5-7b --max-num-seqz 16",
                   *_sim_args(fixed_workload, "--fail-on-regression"))
    assert done.returncode == 1, done.stderr
    assert "B failed (invalid): --max-num-seqz is not a vLLM 0.33.0 flag; did you mean" \
        " --max-num-seqs?" in done.stdout


@pytest.mark.serial  # holds two local servers' timing apart
def test_two_endpoints_and_their_saved_results_give_one_verdict(tmp_path):
    """Two mock servers, B twice as slow to its first token: --url-a/--url-b calls B a
    regression, and so does comparing the two servers' saved results (bench --json
    --detailed), request by request."""
    from sweetspot.testing.mock_server import MockServerConfig, start_mock_server

    quick, slow = MockServerConfig(ttft_s=0.02, itl_s=0.004), MockServerConfig(ttft_s=0.06,
                                                                              itl_s=0.004)
    common = ["--workload", "short", "--num-requests", "24", "--rate", "8", "--seed", "3"]
    with start_mock_server(quick) as url_a, start_mock_server(slow) as url_b:
        live = run_cli("compare", "--url-a", url_a, "--url-b", url_b, *common,
                       "--max-repeats", "3", "--fail-on-regression", "--json",
                       str(tmp_path / "live.json"))
        for name, url in (("a", url_a), ("b", url_b)):
            saved = run_cli("bench", "--url", url, *common, "--json",
                            str(tmp_path / f"{name}.json"), "--detailed")
            assert saved.returncode == 0, saved.stderr
    assert live.returncode == 1, live.stdout + live.stderr
    data = json.loads((tmp_path / "live.json").read_text())
    verdicts = {m["key"]: m["verdict"] for m in data["metrics"]}
    assert data["verdict"] == "worse" and data["source"] == "endpoint"
    assert verdicts["median_ttft_ms"] == "worse", data
    assert "P99 TPOT" not in data["regressions"]  # both stream at one pace
    files = run_cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                    "--fail-on-regression")
    assert files.returncode == 1, files.stdout + files.stderr
    assert "B is worse than A: a regression (P99 TTFT)" in files.stdout
    assert "paired bootstrap" not in files.stdout  # the method is in --json, not the table


def test_a_key_in_a_command_is_written_nowhere(fixed_workload, tmp_path):
    key = "sk-compare-secret-7731"
    done = run_cli("compare", A, f"{A} --api-key {key}",
                   *_sim_args(fixed_workload, "--max-repeats", "2", "--min-repeats", "2",
                              "--json", str(tmp_path / "c.json"),
                              "--markdown", str(tmp_path / "c.md")))
    assert done.returncode == 0, done.stderr
    assert "--api-key" in (tmp_path / "c.json").read_text()  # the flag shows, its value not
    for text in (done.stdout, done.stderr, (tmp_path / "c.json").read_text(),
                 (tmp_path / "c.md").read_text()):
        assert key not in text
