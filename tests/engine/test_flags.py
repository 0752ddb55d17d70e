"""The flag table read from the wheels, checked against vllm-facts.md."""

import pytest
from packaging.version import Version

from sweetspot.engine.flags import FlagStatus, flag_table
from sweetspot.spec.version import NewerThanKnown
from sweetspot.spec.version import parse_vllm_version as v


@pytest.fixture(scope="module")
def table():
    return flag_table()


@pytest.mark.parametrize("flag, present, absent", [
    ("--num-scheduler-steps", "0.10.0", "0.10.1.1"),
    ("--swap-space", "0.17.0", "0.18.0"),
    ("--max-num-partial-prefills", "0.26.0", "0.27.0"),
])
def test_removed_flags(table, flag, present, absent):
    assert table.lookup(flag, v(present)).status == FlagStatus.PRESENT
    assert table.lookup(flag, v(absent)).status == FlagStatus.REMOVED


@pytest.mark.parametrize("flag, first", [
    ("--performance-mode", "0.17.0"),
    ("--kv-offloading-size", "0.12.0"),
    ("--kv-offloading-backend", "0.12.0"),
    ("--stream-interval", "0.12.0"),
    ("--spec-method", "0.22.0"),
    ("--async-scheduling", "0.10.0"),
])
def test_added_flags(table, flag, first):
    info = table.info(flag)
    assert info.first_seen == v(first)
    previous = table.sampled[table.sampled.index(v(first)) - 1]
    assert table.lookup(flag, previous).status == FlagStatus.NOT_YET
    assert table.lookup(flag, v("0.33.0")).status == FlagStatus.PRESENT


def test_speculative_legacy_flags_are_removed_with_their_reason(table):
    look = table.lookup("--speculative-model", v("0.33.0"))
    assert look.status == FlagStatus.REMOVED and look.removed_in == v("0.8.3")
    assert "--speculative-config" in look.legacy.reason


def test_kinds_choices_and_negation(table):
    assert table.info("--gpu-memory-utilization").kind == "float"
    assert table.info("--max-num-seqs").kind == "int"
    assert table.info("--enable-prefix-caching").kind == "bool"
    assert set(table.info("--scheduling-policy").choices) == {"fcfs", "priority"}
    assert set(table.info("--performance-mode").choices) == {
        "balanced", "interactivity", "throughput"}
    look = table.lookup("--no-enable-prefix-caching", v("0.33.0"))
    assert look.status == FlagStatus.PRESENT and look.negated
    assert table.info("-tp").name == "--tensor-parallel-size"
    assert table.info("--max_num_seqs").name == "--max-num-seqs"  # vLLM accepts underscores


def test_alias_younger_than_its_flag(table):
    assert table.lookup("-sc", v("0.17.0")).status == FlagStatus.NOT_YET
    assert table.lookup("-sc", v("0.19.0")).status == FlagStatus.PRESENT


def test_unknown_and_suggestions(table):
    assert table.lookup("--max-num-seq", v("0.33.0")).status == FlagStatus.UNKNOWN
    assert table.suggest("--max-num-seq", v("0.33.0")) == "--max-num-seqs"
    assert table.suggest("--zzz-qqq", v("0.33.0")) is None


def test_releases_between_samples_use_the_sample_below(table, monkeypatch):
    assert table.sample_for(v("0.20.2")) == v("0.20.0")
    monkeypatch.setattr("sweetspot.spec.version._WARNED", set())  # once per process
    with pytest.warns(NewerThanKnown, match="newer than the newest release"):
        newer = v("0.40.0")  # beyond the flag table: a warning, and the newest sample
    assert table.sample_for(newer) == table.sampled[-1]


# 0.6-0.7 (V0): built with packaging's Version, the facts read from those wheels' arg_utils.py
@pytest.mark.parametrize("flag", [
    "--num-scheduler-steps", "--enable-chunked-prefill", "--max-num-seqs", "--block-size",
    "--speculative-model", "--num-speculative-tokens", "--disable-log-requests",
    "--disable-frontend-multiprocessing", "--preemption-mode", "--max-seq-len-to-capture", "-tp",
])
def test_v0_flags_present_from_0_6_0_to_0_7_3(table, flag):
    for release in ("0.6.0", "0.6.3.post1", "0.7.3"):
        assert table.lookup(flag, Version(release)).status == FlagStatus.PRESENT, release


@pytest.mark.parametrize("flag, before, first", [
    ("--multi-step-stream-outputs", "0.6.1.post2", "0.6.2"),
    ("--scheduling-policy", "0.6.2", "0.6.3"),
    ("--compilation-config", "0.6.4.post1", "0.6.5"),
    ("--enable-sleep-mode", "0.6.6.post1", "0.7.0"),
    ("--enable-expert-parallel", "0.7.3", "0.8.0"),
])
def test_v0_flags_added_later(table, flag, before, first):
    assert table.info(flag).first_seen == Version(first)
    look = table.lookup(flag, Version(before))
    assert look.status == FlagStatus.NOT_YET and look.since == Version(first)
    assert table.lookup(flag, Version(first)).status == FlagStatus.PRESENT


def test_v0_flags_removed_before_0_8(table):
    look = table.lookup("--engine-use-ray", Version("0.6.2"))
    assert look.status == FlagStatus.REMOVED and look.last_seen == Version("0.6.1")
    assert table.lookup("--max-context-len-to-capture", Version("0.6.3.post1")).status == (
        FlagStatus.PRESENT)
    assert table.lookup("--max-context-len-to-capture", Version("0.6.4")).status == (
        FlagStatus.REMOVED)


def test_v0_kinds_of_switches(table):
    # StoreBoolean: "--enable-chunked-prefill" or "--enable-chunked-prefill false", no "--no-" form
    info = table.info("--enable-chunked-prefill")
    assert info.kind == "bool" and info.optional_value
    assert table.lookup("--no-enable-chunked-prefill", Version("0.7.3")).status == (
        FlagStatus.NOT_YET)
    # BooleanOptionalAction came to --enable-prefix-caching in 0.6.5
    assert table.lookup("--no-enable-prefix-caching", Version("0.6.4.post1")).status == (
        FlagStatus.NOT_YET)
    assert table.lookup("--no-enable-prefix-caching", Version("0.6.5")).negated
    # a post release maps to its own sample, a base release to the base
    assert table.sample_for(Version("0.6.3.post1")) == Version("0.6.3.post1")
    assert table.sample_for(Version("0.6.4")) == Version("0.6.4")
