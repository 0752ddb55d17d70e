"""The picks figure's data: every goal's numbers against the baseline, over-capacity rows apart."""

from __future__ import annotations

import pytest

from sweetspot.report import picks_data
from sweetspot.report.picks_figure import PICK_METRICS, percent
from tests.report.test_report import GIB, make_study, typed


def panel(data, key):
    return next(p for p in data.panels if p.metric.key == key)


def test_one_panel_per_goal_number_baseline_first():
    data = picks_data(typed(make_study()))
    assert [p.metric.key for p in data.panels] == [
        "output_throughput", "p99_ttft_ms", "p99_tpot_ms", "memory_bytes"]
    assert [p.metric.unit for p in data.panels] == ["tok/s", "ms", "ms", "GiB"]
    for p in data.panels:
        assert [(b.goal, b.trial) for b in p.bars] == [
            ("baseline", 0), ("max-throughput", 10), ("low-latency", 8), ("balanced", 10)]
    assert data.note == ""


def test_values_changes_and_verdicts():
    study = make_study()
    study["trials"][8]["metrics"]["p99_ttft_ms"] = 17_093.0  # low latency hides a slow start
    study["trials"][10]["memory_bytes"] = int(63 * GIB)
    data = picks_data(typed(study))

    thr = panel(data, "output_throughput")
    assert thr.reference == 1000.0
    base, best, *_ = thr.bars
    assert (base.verdict, base.change, base.text) == ("baseline", None, "1,000")
    assert best.change == pytest.approx(0.3) and best.verdict == "better"
    assert best.text == "1,300 (+30 %)"

    ttft = panel(data, "p99_ttft_ms").bars[2]
    assert ttft.value == 17_093.0 and ttft.verdict == "worse"
    assert ttft.text == "17,093 (+6,737 %)"
    tpot = panel(data, "p99_tpot_ms").bars[2]
    assert tpot.verdict == "better" and tpot.text == "30.0 (-25 %)"

    mem = panel(data, "memory_bytes")
    assert mem.reference == pytest.approx(70.0)
    assert mem.bars[1].value == pytest.approx(63.0) and mem.bars[1].verdict == "better"
    assert mem.bars[1].text == "63.0 (-10 %)"
    assert mem.bars[2].verdict == "same" and mem.bars[2].text == "70.0 (+0.0 %)"


def test_small_changes_read_as_same_and_keep_a_decimal():
    study = make_study()
    study["trials"][10]["metrics"]["output_throughput"] = 996.0
    bar = panel(picks_data(typed(study)), "output_throughput").bars[1]
    assert bar.verdict == "same" and bar.text == "996 (-0.4 %)"
    assert percent(-0.004) == "-0.4 %" and percent(24.387) == "+2,439 %"


def test_over_capacity_latencies_are_not_compared():
    study = make_study()
    study["trials"][8]["over_capacity"] = True
    study["trials"][8]["metrics"]["capacity_request_throughput"] = 4.2
    data = picks_data(typed(study))
    for key in ("p99_ttft_ms", "p99_tpot_ms"):
        bar = panel(data, key).bars[2]
        assert (bar.goal, bar.verdict, bar.change, bar.text) == (
            "low-latency", "over capacity", None, "over capacity")
        assert bar.value is not None  # still drawn (hatched): it is what was measured
    assert panel(data, "output_throughput").bars[2].verdict == "better"  # throughput counts
    assert panel(data, "memory_bytes").bars[2].verdict == "same"
    assert "#8: 4.20 req/s" in data.note and "not comparable" in data.note


def test_an_over_capacity_baseline_leaves_latencies_unrated():
    study = make_study()
    study["trials"][0]["over_capacity"] = True
    data = picks_data(typed(study))
    ttft = panel(data, "p99_ttft_ms")
    assert ttft.reference is None
    assert [b.verdict for b in ttft.bars] == ["over capacity", "unrated", "unrated", "unrated"]
    assert ttft.bars[1].text == "250" and ttft.bars[1].change is None
    assert panel(data, "output_throughput").reference == 1000.0
    assert data.note.startswith("Hatched") and "#0)" in data.note  # no capacity known


def test_missing_numbers_and_failed_picks_read_as_no_data():
    study = make_study()
    del study["trials"][8]["metrics"]["p99_tpot_ms"]
    study["trials"][10]["memory_bytes"] = None
    study["picks"].append({"goal": "memory-limited", "trial": 3})  # the oom trial
    study["picks"].append({"goal": "ghost", "trial": 99})  # no such trial: left out
    data = picks_data(typed(study))
    assert [b.goal for b in data.panels[0].bars][-1] == "memory-limited"
    for p in data.panels:
        oom = p.bars[-1]
        assert (oom.value, oom.verdict, oom.text) == (None, "missing", "no data")
    assert panel(data, "p99_tpot_ms").bars[2].verdict == "missing"
    assert panel(data, "memory_bytes").bars[1].verdict == "missing"


def test_nothing_to_draw_without_a_baseline_or_picks():
    study = make_study()
    assert picks_data(typed({**study, "picks": []})) is None
    assert picks_data(typed({**study, "baseline": None})) is None
    assert picks_data(typed({**study, "picks": [{"goal": "x", "trial": 42}]})) is None
    assert picks_data(typed({})) is None


def test_every_metric_says_which_way_is_better():
    assert [m.higher_is_better for m in PICK_METRICS] == [True, False, False, False]
    assert [m.latency for m in PICK_METRICS] == [False, True, True, False]


def test_small_numbers_keep_enough_digits_to_differ():
    study = make_study()
    study["trials"][0]["metrics"]["p99_tpot_ms"] = 1.76
    study["trials"][8]["metrics"]["p99_tpot_ms"] = 1.41
    bars = panel(picks_data(typed(study)), "p99_tpot_ms").bars
    assert (bars[0].text, bars[2].text) == ("1.76", "1.41 (-20 %)")
