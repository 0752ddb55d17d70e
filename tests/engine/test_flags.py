"""The flag table read from the wheels, checked against vllm-facts.md."""

import pytest

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
