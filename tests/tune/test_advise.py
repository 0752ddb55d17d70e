import pytest

from sweetspot._errors import SweetspotError
from sweetspot.engine.lint import lint_command
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version as v
from sweetspot.spec.workload import preset, workload_stats
from sweetspot.tune.advise import GOALS, advise


def guide_setup(version="0.33.0", gpu="a100-80gb", workload="chat", model="qwen2.5-14b",
                quant="awq"):
    return advise(model, load_hardware(gpu), preset(workload), v(version),
                  load_quantization(quant) if quant else None)


def test_four_explained_picks_for_the_guides_setup():
    advice = guide_setup()
    assert [p.goal for p in advice.picks] == list(GOALS)
    assert advice.model_ref == "Qwen/Qwen2.5-14B-Instruct-AWQ"
    for pick in advice.picks:
        assert pick.command.startswith("vllm serve Qwen/Qwen2.5-14B-Instruct-AWQ ")
        assert len(pick.reasons) >= 3 and pick.memory.ok
    by_goal = {p.goal: p for p in advice.picks}
    # Memory-limited leaves most of the GPU to others; max throughput takes the most KV.
    assert by_goal["memory-limited"].config.gpu_memory_utilization <= 0.5
    assert by_goal["max-throughput"].memory.kv_cache_tokens == max(
        p.memory.kv_cache_tokens for p in advice.picks)
    low, high = by_goal["low-latency"].config, by_goal["max-throughput"].config
    assert low.max_num_seqs < high.max_num_seqs


@pytest.mark.parametrize("version, gpu, workload, model, quant", [
    ("0.33.0", "a100-80gb", "chat", "qwen2.5-14b", "awq"),
    ("0.12.0", "a100-80gb", "long", "qwen2.5-14b", "awq"),
    ("0.20.0", "h100", "rag", "llama-3.1-8b", "fp8"),
    ("0.24.0", "h200", "mixed-priority", "qwen3-30b-a3b", None),
    ("0.33.0", "l4", "short", "qwen2.5-7b", "gptq"),
    ("0.10.1.1", "a100-40gb", "chat", "mistral-7b", None),
    ("0.6.3", "h100", "chat", "llama-3.1-8b", None),
    ("0.7.3", "a100-80gb", "long", "qwen2.5-14b", "awq"),
])
def test_every_printed_command_passes_lint(version, gpu, workload, model, quant):
    advice = guide_setup(version, gpu, workload, model, quant)
    for pick in advice.picks:
        report = lint_command(pick.command, v(version), load_hardware(gpu))
        assert report.exit_code == 0, (pick.goal, pick.command, report.errors)


def test_max_model_len_rule():
    advice = guide_setup(workload="long")
    stats = workload_stats(preset("long"))
    expected = -(-int(stats.total.p99 * 1.2) // 1024) * 1024
    assert advice.max_model_len == expected
    assert all(p.config.max_model_len == expected for p in advice.picks)


def test_priority_classes_select_the_priority_policy():
    advice = guide_setup(workload="mixed-priority")
    by_goal = {p.goal: p for p in advice.picks}
    assert by_goal["low-latency"].config.scheduling_policy == "priority"
    assert "--scheduling-policy priority" in by_goal["balanced"].command
    assert guide_setup().picks[1].config.scheduling_policy is None  # chat: fcfs default


def test_speculation_only_where_the_release_supports_it():
    new = {p.goal: p for p in guide_setup().picks}
    assert new["low-latency"].config.speculative.method == "draft_model"
    assert new["max-throughput"].config.speculative is None
    old = {p.goal: p for p in guide_setup(version="0.12.0").picks}
    assert old["low-latency"].config.speculative.method == "ngram"


def test_guide_notes_follow_the_release():
    notes = " ".join(guide_setup().guide_notes)
    assert "lof does not exist" in notes and "0.92" in notes
    old = " ".join(guide_setup(version="0.10.0").guide_notes)
    assert "num-scheduler-steps" not in old  # still there in 0.10.0


def test_v0_releases_turn_prefix_caching_on_and_speak_their_flags():
    """0.6/0.7 (V0): prefix caching is off by default, speculation is --speculative-model."""
    advice = guide_setup(version="0.6.3", gpu="h100", model="llama-3.1-8b", quant=None)
    by_goal = {p.goal: p for p in advice.picks}
    assert all("--enable-prefix-caching" in p.command for p in advice.picks)  # chat's prefix
    assert "off by default in 0.6.3's V0 engine" in " ".join(by_goal["balanced"].reasons)
    low = by_goal["low-latency"].command
    assert "--speculative-model '[ngram]' --num-speculative-tokens" in low
    assert "--speculative-config" not in low
    notes = " ".join(advice.guide_notes)
    assert "are 0.6.3's flags" in notes and "prefix caching off" in notes
    assert "V0 multi-step scheduling" in notes


def test_quantisation_follows_the_checkpoint(qwen_folder):
    """No --quant: what the checkpoint is (a bf16 folder stays bf16, the guide's AWQ id stays
    AWQ); another scheme names its own checkpoint, or is applied at load time (fp8)."""
    h100, chat, version = load_hardware("h100"), preset("chat"), v("0.33.0")
    folder = advise(str(qwen_folder), h100, chat, version)
    assert folder.quant.name == "bf16" and folder.model_ref == str(qwen_folder)
    assert all("--quantization" not in p.command for p in folder.picks)
    fp8 = advise(str(qwen_folder), h100, chat, version, load_quantization("fp8"))
    assert all(p.command.startswith(f"vllm serve {qwen_folder} ") for p in fp8.picks)
    assert all("--quantization fp8" in p.command and "quantization: fp8" in p.yaml
               for p in fp8.picks)
    with pytest.raises(SweetspotError, match="holds bf16 weights"):
        advise(str(qwen_folder), h100, chat, version, load_quantization("awq"))
    awq_id = "Qwen/Qwen2.5-14B-Instruct-AWQ"
    assert advise(awq_id, h100, chat, version).quant.name == "awq"
    bf16 = advise(awq_id, h100, chat, version, load_quantization("bf16"))
    assert bf16.model_ref == "Qwen/Qwen2.5-14B-Instruct"


def test_a_model_that_does_not_fit_gets_a_finding_not_picks():
    advice = guide_setup(gpu="h100", model="llama-3.1-70b", quant="bf16")
    assert advice.picks == () and advice.unfit.tensor_parallel_size == 2
    assert guide_setup(gpu="h100", model="llama-3.1-70b", quant="awq").unfit is None
