"""One SLO syntax for every command: percentile-qualified, bare (P99 + goodput), vLLM's."""

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.metrics.slo import check_slos, parse_slos
from sweetspot.tune.evaluate import parse_slos as tune_slos


def test_the_three_spellings() -> None:
    slos = parse_slos("p99_ttft=300ms, median_tpot=0.05s p99.9_e2el_ms=2s,tpot:40,itl=5")
    assert slos.limits_ms == {"p99_ttft_ms": 300.0, "median_tpot_ms": 50.0,
                              "p99.9_e2el_ms": 2000.0, "p99_tpot_ms": 40.0, "p99_itl_ms": 5.0}
    # Only bare ttft/tpot/e2el are per-request limits (vLLM's --goodput has no itl).
    assert slos.goodput_ms == {"tpot": 40.0}
    assert slos.percentiles == (99.0, 99.9)


def test_bare_and_vllm_spellings_mean_the_same() -> None:
    bare, vllm = parse_slos("ttft=300ms,e2el=2s"), parse_slos("ttft:300 e2el:2000")
    assert bare == vllm
    assert bare.limits_ms == {"p99_ttft_ms": 300.0, "p99_e2el_ms": 2000.0}
    assert bare.goodput_ms == {"ttft": 300.0, "e2el": 2000.0}


@pytest.mark.parametrize(("text", "error"), [
    ("p99_latency=3s", "bad SLO"), ("ttft", "expected p99_ttft=300ms, ttft=300ms or ttft:300"),
    ("ttft=fast", "a time like"), ("ttft=-1ms", "positive"), ("p101_ttft=1s", "0 to 100"),
    ("p99_ttft:300", "vLLM's --goodput spelling"), ("ttft=1s,p99_ttft=2s", "given twice"),
    ("std_ttft=1s", "bad SLO")])
def test_bad_slos_are_one_line_errors(text: str, error: str) -> None:
    with pytest.raises(SweetspotError, match=error) as caught:
        parse_slos(text)
    assert "\n" not in str(caught.value)


def test_tune_reads_the_same_syntax_for_the_statistics_it_measures() -> None:
    assert tune_slos("ttft:300,p95_tpot=50ms,e2el=2s") == {
        "p99_ttft_ms": 300.0, "p95_tpot_ms": 50.0, "p99_e2el_ms": 2000.0}
    with pytest.raises(SweetspotError, match="checks mean, median, p90, p95, p99 only"):
        tune_slos("p99.9_ttft=1s")


def test_check_against_a_result() -> None:
    checks = check_slos(parse_slos("ttft=300,p99.9_itl=10ms"), {"p99_ttft_ms": 250.0})
    assert [(c.slo.key, c.measured_ms, c.met) for c in checks] == [
        ("p99_ttft_ms", 250.0, True), ("p99.9_itl_ms", None, False)]
