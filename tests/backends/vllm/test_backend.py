"""Trials end to end without vLLM: a launch template starts sweetspot's mock server instead.

The mock speaks vLLM's HTTP (health, /metrics, streamed completions), so every phase of a trial
— option check, spawn, health wait, warm-up, workload, teardown — and every way it can end
(ok, refused, died mid-run, start-up failure, deadline, interrupt) is exercised in seconds. The
real CPU-build server runs the same code in test_backend_vllm.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.version import Version

from sweetspot.backends.base import run_in_order
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.vllm import VllmBackend, split_serve_command
from sweetspot.backends.vllm.memory import group_pids
from sweetspot.backends.vllm.server import server_argv, weights_of
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request

MOCK = (f"{shlex.quote(sys.executable)} -m sweetspot.cli mock-server --host {{host}} "
        "--port {port} --model-name {model} --ttft-ms 5 --itl-ms 2")
LOAD = LoadConfig(base_url="", model="")


def _requests(n: int = 8, output: int = 16) -> list[Request]:
    return [Request(i, 0.0, tuple(range(32)), output) for i in range(n)]


def _backend(tmp_path: Path, template: str = MOCK, **kwargs) -> VllmBackend:
    return VllmBackend("tiny-model", trials_dir=tmp_path / "trials", template=template,
                       vllm_version=Version("0.32.0"), startup_timeout_s=30, **kwargs)


def assert_gone(pids) -> None:
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"process {pid} survived"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_ok_trial_has_records_timings_and_memory(tmp_path: Path) -> None:
    trial = _backend(tmp_path).run_args([], _requests(), LOAD)
    assert trial.status == "ok", trial.cause
    assert trial.run is not None and len(trial.run.records) == 8
    assert all(r.error is None and r.output_tokens == 16 for r in trial.run.records)
    t = trial.timings
    assert t.startup_s > 0 and t.warmup_s > 0 and t.workload_s > 0 and t.teardown_s > 0
    assert t.total_s >= t.startup_s + t.warmup_s + t.workload_s
    assert trial.server.memory.host_rss_bytes > 10 * 2**20  # a Python process: over 10 MiB
    assert trial.run.metrics_before is not None and trial.run.metrics_after is not None
    assert trial.log_path.exists() and trial.log_path.parent.name == "trial-0001"
    assert trial.server_pid in trial.server_pids
    assert group_pids(trial.server_pid) == []
    assert_gone(trial.server_pids)
    again = _backend(tmp_path).run_args([], _requests(2), LOAD)  # a new backend, a new folder
    assert again.log_path.parent.name == "trial-0002"


def test_refused_options_start_no_process(tmp_path: Path) -> None:
    """Checked against the flag table of the template's release: no spawn, no folder."""
    backend = _backend(tmp_path, template="false")
    trial = backend.run_args(["--num-scheduler-steps", "8"], _requests(), LOAD)
    assert trial.status == "invalid"
    assert "--num-scheduler-steps" in trial.cause
    assert trial.server_pid is None and trial.run is None
    assert not (tmp_path / "trials").exists()
    own = backend.run_args(["--port", "9"], _requests(), LOAD)
    assert own.status == "invalid" and "set by sweetspot" in own.cause
    short = backend.run_args(["--por=9"], _requests(), LOAD)  # vLLM's parser takes abbreviations
    assert short.status == "invalid" and short.cause.startswith("--por=9 is set by sweetspot")


def test_config_checked_before_rendering(tmp_path: Path) -> None:
    config = ServingConfig(max_num_seqs=256, max_num_batched_tokens=128)
    backend = _backend(tmp_path, template="false", hardware=load_hardware("cpu"))
    trial = run_in_order(backend, config, [(_requests(), LOAD)])
    assert trial.status == "invalid"
    assert "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs" \
        in trial.cause


def test_startup_failure_classified_by_log(tmp_path: Path) -> None:
    line = ("ValueError: To serve at least one request with the model's max seq len (131072), "
            "(2.0 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.0 GiB).")
    template = f"sh -c {shlex.quote(f'echo {shlex.quote(line)}; exit 1')}"
    trial = _backend(tmp_path, template=template).run_args([], _requests(), LOAD)
    assert trial.status == "oom"
    assert trial.cause == line
    assert trial.run is None and trial.timings.total_s < 10


def test_missing_program_is_a_crash_trial(tmp_path: Path) -> None:
    trial = _backend(tmp_path, template="/nonexistent/vllm {args}").run_args([], _requests(),
                                                                            LOAD)
    assert trial.status == "crash" and "/nonexistent/vllm" in trial.cause


def test_startup_deadline_is_timeout(tmp_path: Path) -> None:
    backend = VllmBackend("m", trials_dir=tmp_path, template="sleep 60",
                          vllm_version=Version("0.32.0"), startup_timeout_s=1)
    trial = backend.run_args([], _requests(), LOAD)
    assert trial.status == "timeout" and "start-up deadline" in trial.cause
    assert_gone(trial.server_pids)


def test_run_deadline_is_timeout(tmp_path: Path) -> None:
    slow = MOCK.replace("--itl-ms 2", "--itl-ms 100")  # 64 tokens: 6 s per request
    trial = _backend(tmp_path, template=slow, run_timeout_s=1.5).run_args(
        [], _requests(4, 64), LOAD)
    assert trial.status == "timeout" and "run deadline" in trial.cause
    assert trial.timings.total_s < 20
    assert_gone(trial.server_pids)


def test_server_death_mid_run_is_a_crash(tmp_path: Path) -> None:
    slow = MOCK.replace("--itl-ms 2", "--itl-ms 20")
    pgid: list[int] = []

    def kill_after_first() -> None:
        if len(pgid) == 1:
            os.killpg(pgid.pop(), signal.SIGKILL)

    requests = [Request(0, 0.0, tuple(range(32)), 2), *_requests(6, 64)[1:]]
    trial = _backend(tmp_path, template=slow).run_args(
        [], requests, LOAD, on_ready=lambda h: pgid.append(h.pid),
        on_done=kill_after_first)
    assert trial.status == "crash" and trial.cause.startswith("the server died during the run")
    assert any(r.error for r in trial.run.records)


def test_interrupt_mid_run_leaves_nothing(tmp_path: Path) -> None:
    seen: list = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _backend(tmp_path).run_args([], _requests(8), LOAD, on_ready=seen.append,
                                    on_done=interrupt)
    assert seen and group_pids(seen[0].pid) == []


def test_keep_server_leaves_it_up(tmp_path: Path) -> None:
    trial = _backend(tmp_path).run_args([], _requests(2), LOAD, keep_server=True)
    try:
        assert trial.status == "ok" and trial.kept and trial.timings.teardown_s is None
        assert group_pids(trial.server_pid)
        with __import__("urllib.request").request.urlopen(trial.base_url + "/health") as r:
            assert r.status == 200
    finally:
        os.killpg(trial.server_pid, signal.SIGKILL)


def test_real_weights_unless_dummy_ones_are_asked_for(tmp_path: Path) -> None:
    real = server_argv("py", "m", port=1)
    dummy = server_argv("py", "m", port=1, dummy_weights=True)
    assert "--load-format" not in real
    assert dummy[dummy.index("--load-format") + 1] == "dummy"
    # The last --load-format wins, as in vLLM's parser.
    assert weights_of(["--load-format=dummy"]) == "dummy"
    assert weights_of(["--load_format", "dummy", "--load-format", "auto"]) == "real"
    assert _backend(tmp_path).run_args([], _requests(2), LOAD).weights == "real"
    trial = _backend(tmp_path, dummy_weights=True).run_args([], _requests(2), LOAD)
    assert trial.status == "ok" and trial.to_dict()["weights"] == "dummy"


def test_cli_bench_launch_dry_run_prints_the_command_and_starts_nothing(
        tmp_path: Path) -> None:
    from tests.conftest import run_cli

    marker = tmp_path / "started"
    common = ["bench", "--launch", "--dry-run", "--launch-template", f"touch {marker} {{args}}",
              "--vllm-version", "0.32.0", "--trials-dir", str(tmp_path / "trials"),
              "--slo", "ttft:300"]
    dummy = run_cli(*common, "--dummy-weights", "--", "/models/m", "--max-num-seqs", "8")
    real = run_cli(*common, "--", "/models/m", "--max-num-seqs", "8")
    for done, weights in ((dummy, "dummy"), (real, "real")):
        assert done.returncode == 0, done.stderr
        head, line = done.stdout.strip().splitlines()
        assert f"{weights} weights" in head and "not started" in head
        argv = shlex.split(line)
        assert argv[0] == "env" and "VLLM_NO_USAGE_STATS=1" in argv
        assert argv[argv.index("touch"):][:2] == ["touch", str(marker)]
        assert argv[argv.index("--model") + 1] == "/models/m"
        assert argv[argv.index("--max-num-seqs") + 1] == "8"
        assert ("--load-format" in argv) == (weights == "dummy")
    assert not marker.exists() and not (tmp_path / "trials").exists()
    for flag in ("--dry-run", "--dummy-weights"):
        alone = run_cli("bench", "--url", "http://127.0.0.1:9", flag)
        assert alone.returncode == 2 and f"{flag} goes with --launch" in alone.stderr


def test_split_serve_command() -> None:
    assert split_serve_command(["vllm", "serve", "M", "--max-num-seqs", "8"]) == (
        "M", ["--max-num-seqs", "8"])
    assert split_serve_command(["M"]) == ("M", [])
    assert split_serve_command(["--enforce-eager"]) == (None, ["--enforce-eager"])


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweetspot.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_cli_bench_launch_writes_trial(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = _cli("bench", "--launch", "--launch-template", MOCK, "--vllm-version", "0.32.0",
                "--workload", "short", "--num-requests", "6", "--trials-dir",
                str(tmp_path / "t"), "--json", str(out), "--", "tiny-model")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "Launched server" in stdout and "server ready at" in stderr
    data = json.loads(out.read_text())
    assert data["completed"] == 6 and data["trial"]["status"] == "ok"
    assert data["trial"]["weights"] == "real"  # the model's own, unless --dummy-weights
    assert "Weights" in stdout and "real" in stdout
    assert data["trial"]["timings"]["startup_s"] > 0
    assert_gone(data["trial"]["server_pids"])


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(("signum", "code", "background"), [
    (signal.SIGTERM, 143, False), (signal.SIGINT, 130, False),
    # Started in the background by a script (`sweetspot ... &`), SIGINT comes in ignored.
    (signal.SIGTERM, 143, True), (signal.SIGINT, 130, True)])
def test_cli_killed_mid_trial_stops_the_server(tmp_path: Path, signum: int, code: int,
                                               background: bool) -> None:
    slow = MOCK.replace("--itl-ms 2", "--itl-ms 50")
    proc = _cli("bench", "--launch", "--launch-template", slow, "--vllm-version", "0.32.0",
                "--workload", "short", "--num-requests", "50", "--rate", "inf",
                "--trials-dir", str(tmp_path), "--", "tiny-model",
                preexec_fn=_ignore_sigint if background else None)
    pgid = _wait_ready(proc)
    time.sleep(1.0)
    pids = group_pids(pgid)
    assert pids
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert stderr.strip().endswith("terminated" if signum == signal.SIGTERM else "interrupted")
    assert group_pids(pgid) == []
    assert_gone(pids)


def _wait_ready(proc: subprocess.Popen, timeout_s: float = 60) -> int:
    """The server's process group id, from the CLI's "server ready" line on stderr."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "server ready at" in line:
            return int(line.split("process group ")[1].split(",")[0])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the launched server never became ready")


def test_cli_launch_needs_a_model_and_one_target(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    no_model = run_cli("bench", "--launch", "--launch-template", MOCK, "--vllm-version", "0.32.0")
    assert no_model.returncode == 2 and "--launch needs the model" in no_model.stderr
    both = run_cli("bench", "--launch", "--url", "http://x", "--", "m")
    assert both.returncode == 2 and "either --url" in both.stderr
    no_version = run_cli("bench", "--launch", "--launch-template", MOCK, "--", "m")
    assert no_version.returncode == 2 and "needs --vllm-version" in no_version.stderr
    bad_python = run_cli("bench", "--launch", "--vllm-python", str(tmp_path / "py"), "--", "m")
    assert bad_python.returncode == 2 and "no such interpreter" in bad_python.stderr
    stray = run_cli("bench", "--url", "http://x", "--", "m", "--max-num-seqs", "8")
    assert stray.returncode == 2 and "unexpected arguments" in stray.stderr


def test_every_tuner_backend_has_a_name() -> None:
    """The tuner reads ``Backend.name`` (e.g. to keep burst warnings to measured trials)."""
    from sweetspot.backends.endpoint import EndpointBackend
    from sweetspot.backends.sim.backend import SimBackend

    assert (VllmBackend.name, EndpointBackend.name, SimBackend.name) == ("vllm", "endpoint", "sim")


def test_a_server_wanting_a_key_is_sent_the_one_it_was_started_with(tmp_path: Path) -> None:
    """A launched server started with --api-key gets its key from the launcher; a wrong key
    makes every request a 401, and the trial is a failed one ("auth") with the hint, never
    "ok" with zero latencies."""
    keyed = MOCK + " --api-key sekret"
    trial = _backend(tmp_path, template=keyed).run_args(["--api-key", "sekret"], _requests(),
                                                         LOAD)
    assert trial.status == "ok", trial.cause
    assert all(r.error is None for r in trial.run.records)
    wrong = dataclasses.replace(LOAD, headers=(("Authorization", "Bearer wrong"),))
    trial = _backend(tmp_path, template=keyed).run_args(["--api-key", "sekret"], _requests(),
                                                         wrong)
    assert trial.status == "auth"
    assert "HTTP 401" in trial.cause and "--api-key" in trial.cause
    assert_gone(trial.server_pids)


def test_a_run_whose_requests_all_fail_is_a_crash(tmp_path: Path) -> None:
    trial = _backend(tmp_path, template=MOCK + " --fail-rate 1").run_args([], _requests(), LOAD)
    assert trial.status == "crash" and trial.cause.startswith("every request failed: HTTP 500")
