"""The command line as a user meets it: exit codes, one-line errors, no tracebacks."""

import json
import subprocess
import sys

import pytest

from sweetspot.spec.version import DEFAULT_VLLM_VERSION
from tests.conftest import run_cli

GUIDE = ("vllm serve Qwen/Qwen2.5-14B-Instruct --max-num-seqs 256 --max-model-len 8192 "
         "--gpu-memory-utilization 0.95 --enable-prefix-caching --scheduling-policy lof "
         "--num-scheduler-steps 8 --speculative-model Qwen/Qwen2.5-0.5B-Instruct "
         "--num-speculative-tokens 8")


def test_lint_guide_template_then_its_correction():
    first = run_cli("lint", GUIDE, "--vllm-version", "0.33.0", "--gpu", "a100-80gb")
    assert first.returncode == 1, first.stderr
    for flag in ("--scheduling-policy", "--num-scheduler-steps", "--speculative-model"):
        assert flag in first.stdout
    lines = first.stdout.splitlines()
    corrected = lines[lines.index("corrected command:") + 1]
    second = run_cli("lint", corrected, "--vllm-version", "0.33.0", "--gpu", "a100-80gb")
    assert second.returncode == 0, second.stdout
    assert "ok: vLLM would accept this command" in second.stdout


def test_lint_json():
    result = run_cli("lint", GUIDE, "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["corrected"] and not data["ok"]


def test_advise_prints_four_picks_that_lint_accepts():
    result = run_cli("advise", "--model", "qwen2.5-14b", "--gpu", "a100-80gb", "--quant", "awq",
                     "--workload", "chat", "--json")
    assert result.returncode == 0, result.stderr
    picks = json.loads(result.stdout)["picks"]
    assert [p["goal"] for p in picks] == ["max-throughput", "low-latency", "memory-limited",
                                          "balanced"]
    for pick in picks:
        assert pick["reasons"]
        check = run_cli("lint", pick["command"], "--vllm-version", "0.33.0", "--gpu", "a100-80gb")
        assert check.returncode == 0, (pick["command"], check.stdout)


def test_advise_default_is_the_guides_setup_and_writes_yaml(tmp_path):
    result = run_cli("advise", "--yaml-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Qwen/Qwen2.5-14B-Instruct-AWQ" in result.stdout
    assert "where the field guide does not hold" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "balanced.yaml", "low-latency.yaml", "max-throughput.yaml", "memory-limited.yaml"]


@pytest.mark.parametrize("args, message", [
    (("advise", "--gpu", "v100"), "unknown GPU 'v100'"),
    (("advise", "--model", "gpt-5"), "unknown model 'gpt-5'"),
    (("advise", "--rate", "fast"), "Invalid value for '--rate'"),
    (("advise", "--rate", "-3"), "--rate must be a positive number"),
    (("advise", "--rate", "nan"), "--rate must be a positive number"),
    (("bench", "--rate", "nan", "--url", "http://127.0.0.1:9"), "--rate must be a positive"),
    (("tune", "--rate", "nan"), "bad --rate 'nan'"),
    (("bench", "--url", "ftp://127.0.0.1:9"), "not a server URL: 'ftp://127.0.0.1:9'"),
    (("bench", "--url", "127.0.0.1:9"), "not a server URL"),
    (("tune", "--study-name", "../x"), "--study-name '../x': use letters"),
    (("tune", "--study-name", "a/b"), "not a path"),
    (("tune", "--study-name", "a\x07b"), "not a path"),
    (("report", "../../escape"), "study '../../escape': use letters"),
    (("advise", "--quant", "int3"), "unknown quantisation 'int3'"),
    (("advise", "--workload", "nope"), "unknown workload 'nope'"),
    (("advise", "--vllm-version", "abc"), "not a vLLM version"),
    (("lint", "docker run foo"), "not a vllm serve command line"),
    (("lint", "vllm serve m", "--gpu", "tpu-v5"), "unknown GPU"),
    (("lint",), "Missing argument"),
    (("frobnicate",), "No such command"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr + result.stdout


def test_model_folder_missing_fields(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    result = run_cli("advise", "--model", str(tmp_path), "--quant", "bf16")
    assert result.returncode == 2
    assert "missing fields" in result.stderr and "Traceback" not in result.stderr


def test_model_folder_works(qwen_folder):
    result = run_cli("advise", "--model", str(qwen_folder), "--quant", "bf16", "--gpu", "h100")
    assert result.returncode == 0, result.stderr
    assert f"vllm serve {qwen_folder} " in result.stdout


def test_catalog():
    result = run_cli("catalog")
    assert result.returncode == 0 and "h200" in result.stdout and "mixtral-8x7b" in result.stdout


def test_mock_server_command_serves_until_terminated():
    import signal
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "sweetspot.cli", "mock-server", "--port", "0",
                             "--ttft-ms", "1"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("mock server listening on http://127.0.0.1:")
        url = line.split()[-1]
        with urllib.request.urlopen(url + "/health", timeout=10) as response:
            assert response.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_testing_make_model_writes_a_servable_pair(tmp_path):
    result = run_cli("testing", "make-model", str(tmp_path / "tiny"), "--layers", "3")
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "tiny" / "model" / "config.json").read_text())
    assert config["num_hidden_layers"] == 3
    assert (tmp_path / "tiny" / "tokenizer" / "tokenizer.json").is_file()
    # beside the tokenizer, a config that keeps transformers on tokenizer.json (not qwen2)
    tokenizer_config = json.loads((tmp_path / "tiny" / "tokenizer" / "config.json").read_text())
    assert tokenizer_config["model_type"] != config["model_type"]
    # The catalog-free path of the memory model reads the same folder.
    lint = run_cli("lint", f"vllm serve {tmp_path / 'tiny' / 'model'} --max-model-len 2048",
                   "--gpu", "cpu", "--vllm-version", "0.32.0")
    assert lint.returncode == 0, lint.stdout
    bad = run_cli("testing", "make-model", str(tmp_path / "x"), "--hidden", "100",
                  "--heads", "3")
    assert bad.returncode == 2 and "multiple of heads" in bad.stderr


def test_simulate_prints_the_bench_table_and_server_facts(tmp_path):
    out = tmp_path / "sim.json"
    result = run_cli("simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--workload",
                     "chat", "--num-requests", "200", "--rate", "8", "--set",
                     "max_num_seqs=64", "--json", str(out))
    assert result.returncode == 0, result.stderr
    for label in ("Output token throughput", "KV cache capacity", "Peak KV cache usage",
                  "Preemptions", "Prefix cache hit rate", "Steps bound by compute / memory",
                  "GPU KV cache size: "):
        assert label in result.stdout
    data = json.loads(out.read_text())
    assert data["status"] == "ok" and data["completed"] == 200
    assert data["sweetspot"]["config"]["max_num_seqs"] == 64
    assert 0 < data["simulator"]["prefix_cache_hit_rate"] < 1  # the chat preset's system prompt
    assert data["simulator"]["step_model"] == "roofline"


@pytest.mark.parametrize(("args", "engine", "note"), [
    (("--vllm-version", "0.6.3"), "V0", ""),
    (("--vllm-version", "0.7.3", "--set", "num_scheduler_steps=10"), "V0, multi-step 10", ""),
    (("--vllm-version", "0.19.1.dev12+gabc"), "V1, async scheduling",
     "warning: vLLM 0.19.1.dev12+gabc is a development release build: taken as 0.19.1"),
    (("--vllm-version", "nightly", "--offline"), "V1, async scheduling, offline (no API server)",
     "warning: vLLM nightly is taken as 0.33.0, the newest release sweetspot has checked"),
])
def test_simulate_any_release_from_0_6_and_offline(tmp_path, args, engine, note):
    out = tmp_path / "sim.json"
    result = run_cli("simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-requests",
                     "50", "--json", str(out), *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == note.replace("0.33.0", str(DEFAULT_VLLM_VERSION))
    data = json.loads(out.read_text())
    assert data["simulator"]["engine"] == engine and data["completed"] == 50
    assert data["sweetspot"]["offline"] is ("--offline" in args)


def test_simulate_a_config_vllm_refuses_is_a_failed_trial_not_an_error(tmp_path):
    out = tmp_path / "sim.json"
    result = run_cli("simulate", "--model", "llama-3.1-70b", "--gpu", "l4", "--num-requests",
                     "5", "--json", str(out))
    assert result.returncode == 1
    assert "trial: oom" in result.stdout and "not enough GPU memory" in result.stdout
    assert json.loads(out.read_text())["status"] == "oom"


@pytest.mark.parametrize(("args", "message"), [
    (("--rate", "-3"), "--rate must be a positive number"),
    (("--rate", "nan"), "--rate must be a positive number"),
    (("--num-requests", "10000000000"), "more than one run holds"),
    (("--rate", "fast"), "--rate must be a number"),
    (("--set", "max_num_sequences=4"), "unknown knob"),
    (("--set", "max_num_seqs"), "expected knob=value"),
    (("--set", "max_num_seqs=lots"), "bad value"),
    (("--set", "gpu_memory_utilization=1.5"), "must be <= 1"),
    (("--gpu", "tpu-v9"), "unknown"),
    (("--workload", "missing.yaml"), ""),
    (("--acceptance", "2"), "--acceptance"),
    (("--offline", "--rate", "3"), "--offline hands the engine every request at once"),
    (("--offline", "--concurrency", "3"), "leave out --rate and --concurrency"),
    (("--vllm-version", "0.5.4"), "older than the oldest release sweetspot knows (0.6.0)"),
])
def test_simulate_bad_input_is_one_line_exit_2(args, message):
    result = run_cli("simulate", "--num-requests", "5", *args)
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("error:") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_advise_a_model_that_does_not_fit_says_so_and_names_tensor_parallelism():
    """Llama-3.1-70B in bf16 (131 GiB) on one H100: no command that cannot start, exit 1."""
    from sweetspot.engine.lint import lint_command
    from sweetspot.spec.hardware import load_hardware
    from sweetspot.spec.version import parse_vllm_version

    args = ("advise", "--model", "llama-3.1-70b", "--quant", "bf16", "--gpu", "h100")
    result = run_cli(*args)
    assert result.returncode == 1, result.stderr
    assert "does not fit on one NVIDIA H100" in result.stdout
    assert "--tensor-parallel-size 2 on 2 GPUs" in result.stdout
    assert "vllm serve" not in result.stdout and not result.stderr
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["fits"] is False and data["tensor_parallel_size"] == 2 and data["picks"] == []
    split = run_cli(*args, "--tensor-parallel-size", "2", "--json")
    assert split.returncode == 0, split.stderr
    picks = json.loads(split.stdout)["picks"]
    assert len(picks) == 4
    for pick in picks:
        assert "--tensor-parallel-size 2" in pick["command"]
        report = lint_command(pick["command"], parse_vllm_version("0.33.0"),
                              load_hardware("h100"))
        assert report.exit_code == 0, (pick["command"], report.findings)


def test_simulate_a_model_that_does_not_fit_names_tensor_parallelism(tmp_path):
    out = tmp_path / "sim.json"
    args = ("simulate", "--model", "llama-3.1-70b", "--quant", "bf16", "--gpu", "h100",
            "--num-requests", "20", "--set", "max_model_len=8192")
    result = run_cli(*args, "--json", str(out))
    assert result.returncode == 1, result.stderr
    assert "trial: oom" in result.stdout and "Traceback" not in result.stderr
    assert "--tensor-parallel-size 2 on 2 GPUs" in result.stdout
    assert json.loads(out.read_text())["fit"]["tensor_parallel_size"] == 2
    split = run_cli(*args, "--set", "tensor_parallel_size=2")
    assert split.returncode == 0, split.stdout + split.stderr


def test_a_missing_dependency_names_what_to_install(tmp_path, monkeypatch):
    """A broken environment (optuna blocked from importing, as if never installed) is one
    line naming the package and how to install it, exit 2; not an internal error."""
    import os

    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n\n\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'optuna':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n\n\n"
        "sys.meta_path.insert(0, _Block())\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    result = run_cli("tune", "--trials", "2", "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: missing dependency: the Python package optuna is "
                                    "not installed; pip install")
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("module", "says"), [
    ("yaml", "the Python package pyyaml is not installed; pip install "),
    ("pynvml", "nvidia-ml-py is not installed"),
    ("vllm", "pass --vllm-python with an interpreter that has it"),
    ("some_plugin", "some-plugin is not installed; pip install some-plugin"),
])
def test_missing_module_to_pip_package(module, says):
    from sweetspot.cli import _missing_dependency

    assert says in _missing_dependency(ModuleNotFoundError("gone", name=module))


def test_sweetspots_own_import_failure_stays_an_internal_error():
    from sweetspot.cli import _missing_dependency

    assert _missing_dependency(ModuleNotFoundError("gone", name="sweetspot.tune.nope")) is None
    assert _missing_dependency(ImportError("no name")) is None
    older = _missing_dependency(ImportError("cannot import name 'X' from 'optuna'",
                                            name="optuna"))
    assert older.startswith("the installed optuna lacks what sweetspot needs")


def test_a_release_newer_than_known_is_one_warning_line_and_runs():
    result = run_cli("advise", "--vllm-version", "99.0.0")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: vLLM 99.0.0 is newer")
    assert "0.33.0" in lines[0]
    assert not run_cli("advise", "--vllm-version", "0.33.0").stderr.strip()


HEAVY = ("optuna", "matplotlib", "scipy", "sqlalchemy", "aiohttp", "numpy", "tokenizers",
         "sweetspot.testing", "sweetspot.tune", "sweetspot.backends")


@pytest.mark.parametrize("argv", [["--help"], ["lint", "vllm serve m --max-num-seqs 64"]])
def test_help_and_lint_import_only_what_they_use(argv):
    """`sweetspot --help` and `sweetspot lint` start without the study, simulator, client or
    plotting stacks (issue 19: they start in 0.3 s; benchmarks/startup.py measures it)."""
    probe = (
        "import sys\n"
        f"sys.argv = ['sweetspot', *{argv!r}]\n"
        "import sweetspot.cli\n"
        "try:\n"
        "    sweetspot.cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert "LOADED []" in done.stderr, done.stderr


def test_make_model_without_tokenizers_names_the_testing_extra(tmp_path):
    """tokenizers is no runtime dependency: only `testing make-model` needs it, through the
    `testing` extra, and says so when it is missing."""
    probe = (
        "import sys\n"
        "sys.modules['tokenizers'] = None  # as if not installed\n"
        f"sys.argv = ['sweetspot', 'testing', 'make-model', {str(tmp_path / 'm')!r}]\n"
        "import sweetspot.cli\n"
        "sweetspot.cli.main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("error: missing dependency: the Python package "
                                          "tokenizers is not installed")
    assert "vllm-sweetspot[testing]" in done.stderr
