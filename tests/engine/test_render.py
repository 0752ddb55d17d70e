import yaml

from sweetspot.engine.cmdline import parse_serve_command
from sweetspot.engine.flags import flag_table
from sweetspot.engine.render import render_serve, render_yaml
from sweetspot.spec.hardware import GiB
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.version import parse_vllm_version as v

CONFIG = ServingConfig(
    max_num_seqs=128, max_model_len=8192, gpu_memory_utilization=0.9,
    enable_prefix_caching=False, scheduling_policy="priority", num_scheduler_steps=8,
    speculative=SpeculativeConfig("ngram", 4, prompt_lookup_max=4),
    performance_mode="throughput", kv_offloading_bytes=16 * GiB,
)


def test_argv_for_a_new_release():
    rendered = render_serve(CONFIG, "Qwen/Qwen2.5-7B-Instruct", v("0.33.0"))
    argv = rendered.argv()
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert "--num-scheduler-steps" not in argv
    assert "--no-enable-prefix-caching" in argv
    assert argv[argv.index("--speculative-config") + 1] == (
        '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}')
    assert argv[argv.index("--kv-offloading-size") + 1] == "16"
    assert any("num-scheduler-steps" in n and "0.10.1" in n for n in rendered.notes)


def test_flags_a_release_lacks_are_left_out_with_a_note():
    rendered = render_serve(CONFIG, "m", v("0.11.0"))
    flags = [flag for flag, _ in rendered.options]
    assert "--performance-mode" not in flags and "--kv-offloading-size" not in flags
    assert "--num-scheduler-steps" not in flags
    old = render_serve(CONFIG, "m", v("0.10.0"))  # V0 still had multi-step scheduling
    assert ("--num-scheduler-steps", 8) in old.options


def test_speculation_before_0_8_3_is_spelled_with_the_old_flags():
    flags = dict(render_serve(CONFIG, "m", v("0.6.3")).options)
    assert (flags["--speculative-model"], flags["--num-speculative-tokens"],
            flags["--ngram-prompt-lookup-max"]) == ("[ngram]", 4, 4)
    assert "--speculative-config" not in flags and flags["--num-scheduler-steps"] == 8
    draft = ServingConfig(speculative=SpeculativeConfig("draft_model", 3, model="d"))
    assert dict(render_serve(draft, "m", v("0.8.2")).options) == {
        "--speculative-model": "d", "--num-speculative-tokens": 3}
    mtp = render_serve(ServingConfig(speculative=SpeculativeConfig("mtp", 1)), "m", v("0.7.3"))
    assert not mtp.options and "no flag for it" in mtp.notes[0]


def test_rendered_command_parses_back():
    rendered = render_serve(CONFIG, "Qwen/Qwen2.5-7B-Instruct", v("0.33.0"))
    cmd = parse_serve_command(rendered.command(), flag_table())
    assert cmd.model == "Qwen/Qwen2.5-7B-Instruct"
    assert [o.spelling for o in cmd.options] == [f for f, _ in rendered.options]


def test_yaml_config_per_release():
    new = yaml.safe_load(render_yaml(CONFIG, "m", v("0.33.0")))
    assert new["model"] == "m" and new["max-num-seqs"] == 128
    assert new["enable-prefix-caching"] is False  # vLLM >= 0.28 turns false into --no-...
    assert new["speculative-config"] == {"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_max": 4}
    old = yaml.safe_load(render_yaml(CONFIG, "m", v("0.14.0")))
    assert old["no-enable-prefix-caching"] is True  # older loaders drop a false boolean
    assert isinstance(old["speculative-config"], str)  # nested mappings only from 0.16
