import pytest

from sweetspot.engine.lint import lint_command
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.version import parse_vllm_version as v

A100 = load_hardware("a100-80gb")
GUIDE_TEMPLATE = (
    "vllm serve Qwen/Qwen2.5-14B-Instruct --max-num-seqs 256 --max-model-len 8192 "
    "--gpu-memory-utilization 0.95 --enable-prefix-caching --scheduling-policy lof "
    "--num-scheduler-steps 8 --speculative-model Qwen/Qwen2.5-0.5B-Instruct "
    "--num-speculative-tokens 8"
)


def errors(report):
    return {f.flag for f in report.errors}


def test_guide_template_names_the_three_broken_flags_and_is_corrected():
    report = lint_command(GUIDE_TEMPLATE, v("0.33.0"), A100)
    assert report.exit_code == 1
    assert errors(report) == {"--scheduling-policy", "--num-scheduler-steps",
                              "--speculative-model", "--num-speculative-tokens"}
    messages = " ".join(f.message for f in report.errors)
    assert "fcfs" in messages and "priority" in messages
    assert "removed in vLLM 0.10.1" in messages and "async scheduling" in messages
    assert "removed in vLLM 0.8.3" in messages
    corrected = report.corrected
    assert "lof" not in corrected and "--num-scheduler-steps" not in corrected
    assert ("--speculative-config '{\"method\":\"draft_model\",\"model\":"
            "\"Qwen/Qwen2.5-0.5B-Instruct\",\"num_speculative_tokens\":8}'") in corrected
    again = lint_command(corrected, v("0.33.0"), A100)
    assert again.exit_code == 0, again.findings
    assert again.corrected is None
    assert again.memory.kv_cache_tokens > 100_000


def test_old_release_gets_ngram_and_async_scheduling():
    report = lint_command(
        "vllm serve Qwen/Qwen2.5-14B-Instruct --num-scheduler-steps 8", v("0.12.0"), A100)
    assert report.corrected.endswith("--async-scheduling")  # off by default before 0.14
    assert lint_command(report.corrected, v("0.12.0"), A100).exit_code == 0
    spec = lint_command(GUIDE_TEMPLATE, v("0.12.0"), A100)
    assert '"method":"ngram"' in spec.corrected  # draft models on V1 only from 0.15
    assert "--async-scheduling" not in spec.corrected  # refused beside ngram in 0.12
    assert lint_command(spec.corrected, v("0.12.0"), A100).exit_code == 0


def test_misspelled_flag_is_suggested_and_fixed():
    report = lint_command("vllm serve m --max-num-seq 64 --gpu-memory-utilisation 0.9",
                          v("0.33.0"))
    assert report.exit_code == 1
    assert "did you mean --max-num-seqs?" in report.errors[0].message
    assert report.corrected == ("vllm serve m --max-num-seqs 64 "
                                "--gpu-memory-utilization 0.9")
    assert lint_command(report.corrected, v("0.33.0")).exit_code == 0


@pytest.mark.parametrize("option, message", [
    ("--max-num-seqs abc", "expects an int"),
    ("--gpu-memory-utilization 1.5", "must be <= 1"),
    ("--gpu-memory-utilization 0", "must be > 0"),
    ("--kv-cache-dtype fp4", "must be one of auto"),
    ("--speculative-config '{broken'", "expects a json"),
    ("--enforce-eager=yes", "takes no value"),
    ("--enforce-eager yes", "unexpected word 'yes'"),
    ("--performance-mode fast", "must be one of balanced"),
])
def test_bad_values(option, message):
    report = lint_command(f"vllm serve qwen2.5-7b {option}", v("0.33.0"), A100)
    assert report.exit_code == 1
    assert any(message in f.message for f in report.errors), report.findings


def test_flags_of_other_releases():
    report = lint_command("vllm serve m --performance-mode throughput --swap-space 4",
                          v("0.16.0"))
    assert {f.code for f in report.errors} == {"not-yet-flag"}
    report = lint_command("vllm serve m --swap-space 4", v("0.18.0"))
    assert "removed in vLLM 0.18.0" in report.errors[0].message
    assert report.corrected == "vllm serve m"


def test_cross_setting_checks():
    report = lint_command("vllm serve qwen2.5-7b --max-num-seqs 512 --max-num-batched-tokens 256",
                          v("0.33.0"), A100)
    assert "must be greater than or equal to max_num_seqs (512)" in report.errors[0].message
    assert "--max-num-batched-tokens 512" in report.corrected
    report = lint_command("vllm serve qwen2.5-7b --max-model-len 65536", v("0.33.0"), A100)
    assert "greater than the derived max_model_len" in report.errors[0].message
    report = lint_command("vllm serve qwen2.5-7b -tp 3", v("0.33.0"), A100)
    assert "must be divisible by tensor parallel size (3)" in report.errors[0].message


def test_memory_problems_on_the_gpu():
    report = lint_command("vllm serve Qwen/Qwen2.5-72B-Instruct", v("0.33.0"), A100)
    assert report.exit_code == 1
    assert "Failed to load model" in report.errors[0].message
    assert report.corrected is None  # needs a decision: more GPUs or quantisation
    long = lint_command("vllm serve qwen2.5-7b --gpu-memory-utilization 0.2 "
                        "--max-model-len 32768", v("0.33.0"), A100)
    assert "estimated maximum model length" in long.errors[0].message
    assert lint_command(long.corrected, v("0.33.0"), A100).exit_code == 0
    old = lint_command("vllm serve qwen2.5-7b --gpu-memory-utilization 0.99", v("0.20.0"), A100)
    assert "CUDA graph" in old.errors[0].message
    assert lint_command(old.corrected, v("0.20.0"), A100).exit_code == 0
    # The same command on a release that counts CUDA graphs at profiling is fine.
    assert lint_command("vllm serve qwen2.5-7b --gpu-memory-utilization 0.99", v("0.33.0"),
                        A100).exit_code == 0


def test_unknown_model_skips_memory_but_lints_flags():
    report = lint_command("vllm serve my-org/secret-model --max-num-seqs 64", v("0.33.0"), A100)
    assert report.exit_code == 0
    assert any("memory checks skipped" in f.message for f in report.findings)


def test_json_report_shape():
    data = lint_command(GUIDE_TEMPLATE, v("0.33.0"), A100).to_dict()
    assert data["ok"] is False and data["vllm_version"] == "0.33.0"
    assert {f["severity"] for f in data["findings"]} >= {"error", "info"}
    assert data["memory"]["kv_cache_tokens"] > 0


def test_settings_that_repeat_the_default_are_pointed_out():
    report = lint_command("vllm serve qwen2.5-7b --max-num-seqs 256 --enable-prefix-caching "
                          "--gpu-memory-utilization 0.92", v("0.33.0"), A100)
    notes = [f.message for f in report.findings if f.severity == "info"]
    assert "--max-num-seqs 256 is vLLM 0.33.0's default on a100-80gb; it can be omitted" in notes
    assert "--enable-prefix-caching is vLLM 0.33.0's default; it can be omitted" in notes
    h100 = lint_command("vllm serve qwen2.5-7b --max-num-seqs 256", v("0.33.0"),
                        load_hardware("h100"))
    assert not any("default" in f.message for f in h100.findings)  # 1024 there


def test_auto_max_model_len_fits_the_kv_cache():
    report = lint_command("vllm serve qwen2.5-7b --gpu-memory-utilization 0.2 "
                          "--max-model-len auto", v("0.33.0"), A100)
    assert report.exit_code == 0, report.errors
    assert any("auto: vLLM will fit max-model-len" in f.message for f in report.findings)
    assert lint_command("vllm serve qwen2.5-7b --max-model-len 8k", v("0.33.0"),
                        A100).memory.max_model_len == 8000
