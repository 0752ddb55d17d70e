"""The rate search (goodput capacity) against a fake server whose latency at each offered rate
is known, so the right answer is known: the ladders, the answer's bounds, failures, resume."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from sweetspot.backends.base import Run
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.evaluate import Evaluator, parse_slos
from sweetspot.tune.rate import RateSearch, search_rate
from tests.backends import fake

CAPACITY = 10.0  # requests/s at rate inf
BASE_TPOT_S = 0.010
N = 40
# Constant arrivals: the offered rate of a run is exactly the rate asked for.
WORKLOAD = validate_workload({"name": "w", "prompt": {"kind": "fixed", "value": 8},
                              "output": {"kind": "fixed", "value": 10},
                              "arrival": {"process": "constant", "rate": 1.0}}, "test")


class QueueFake(fake.FakeBackend):
    """TPOT grows as 1 / (1 - load), load = offered rate / CAPACITY, so an SLO on P99 TPOT of
    L seconds holds up to exactly CAPACITY * (1 - BASE_TPOT_S / L). At rate inf it serves
    CAPACITY requests per second. ``crash_at`` kills the server when a rate from there up to
    (not including) rate inf comes up."""

    def __init__(self, crash_at: float | None = None, interrupt_on: int | None = None):
        self.calls: list[list[float]] = []  # per server, the rates its runs were offered
        self.crash_at = crash_at
        self.interrupt_on = interrupt_on

    def start(self, config: ServingConfig) -> None:
        if self.interrupt_on is not None and len(self.calls) + 1 == self.interrupt_on:
            raise KeyboardInterrupt
        self.calls.append([])

    def answer(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig,
               index: int) -> Run | tuple[str, str]:
        rate = _offered(requests)
        self.calls[-1].append(rate)
        if self.crash_at is not None and self.crash_at - 1e-9 <= rate < math.inf:
            return "crash", "the server died during the run: boom"
        return _run(requests, rate)


def _offered(requests: Sequence[Request]) -> float:
    arrivals = sorted(r.arrival_s for r in requests)
    span = arrivals[-1] - arrivals[0]
    return (len(arrivals) - 1) / span if span > 0 else math.inf


def _run(requests: Sequence[Request], rate: float) -> Run:
    records = []
    for i, r in enumerate(requests):
        if math.isinf(rate):  # served one after another at CAPACITY
            start, tpot = i / CAPACITY, 1 / CAPACITY / r.output_tokens
        else:
            start, tpot = r.arrival_s, BASE_TPOT_S / (1 - min(rate / CAPACITY, 0.999))
        chunks = tuple(start + tpot * (k + 1) for k in range(r.output_tokens))
        records.append(RequestRecord(r.request_id, r.arrival_s, r.arrival_s, chunks,
                                     chunks[-1], r.prompt_tokens, r.output_tokens))
    return Run(tuple(records), max(c.end_s for c in records), 1)


def _evaluator(backend: QueueFake, slos: str) -> Evaluator:
    return Evaluator(backend, WORKLOAD, N, parse_slos(slos), vocab_size=100)


def _search(backend: QueueFake, slos: str, state: RateSearch | None = None,
            on_round=None) -> RateSearch:
    evaluator = _evaluator(backend, slos)
    row, _ = evaluator.evaluate(ServingConfig())
    return search_rate(evaluator, ServingConfig(), row.stored(0, "baseline", None), state,
                       on_round)


def test_the_answer_brackets_the_true_goodput_within_four_percent_of_capacity() -> None:
    backend = QueueFake()
    search = _search(backend, "p99_tpot=24ms")
    truth = CAPACITY * (1 - BASE_TPOT_S / 0.024)  # 5.83 req/s
    assert search.capacity_rps == pytest.approx(CAPACITY, rel=1e-6)
    assert search.max_rate is not None and search.first_failure is not None
    assert search.max_rate <= truth < search.first_failure
    assert search.first_failure - search.max_rate <= 0.04 * CAPACITY + 1e-9
    assert search.limited_by() == ["p99_tpot_ms"]
    # One trial (one server) per ladder after the evaluation (rate inf and the workload's own
    # rate): then 5 rates, then 4.
    assert [len(c) for c in backend.calls] == [2, 5, 4]
    assert backend.calls[1] == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0])
    assert all(4.0 < r < 6.0 for r in backend.calls[2])


def test_an_slo_met_up_to_capacity_ends_after_one_ladder() -> None:
    backend = QueueFake()
    search = _search(backend, "p99_tpot=20s")  # 10 s at capacity (load capped at 0.999)
    assert search.max_rate == pytest.approx(CAPACITY) and search.first_failure is None
    assert search.limited_by() == [] and len(backend.calls) == 2


def test_an_slo_missed_at_every_rate_has_no_answer() -> None:
    search = _search(QueueFake(), "p99_tpot=5ms")  # below the unloaded TPOT
    # The refinement looks below the lowest ladder rate too: goodput may be under 20 %.
    assert search.max_rate is None and search.first_failure == pytest.approx(0.4)
    assert len(search.probes) == 9 and search.to_dict()["max_rate"] is None


def test_a_server_dying_at_a_rate_fails_that_rate_and_those_after() -> None:
    backend = QueueFake(crash_at=8.0)
    search = _search(backend, "p99_tpot=2s")
    statuses = {round(p["rate"], 3): (p["ok"], p["status"]) for p in search.probes}
    assert statuses[6.0] == (True, "ok")
    assert statuses[8.0] == (False, "crash") and statuses[10.0] == (False, "crash")
    assert 6.0 <= search.max_rate < 8.0
    assert search.limited_by()[0].startswith("crash")


def test_an_interrupted_search_resumes_from_its_stored_ladders() -> None:
    stored: dict = {}
    backend = QueueFake(interrupt_on=3)  # the evaluation, the first ladder, then the kill
    with pytest.raises(KeyboardInterrupt):
        _search(backend, "p99_tpot=24ms", on_round=lambda s: stored.update(s.to_dict()))
    assert stored["rounds"] == 1 and len(stored["probes"]) == 5
    again = QueueFake()
    search = _search(again, "p99_tpot=24ms", state=RateSearch.from_dict(stored))
    assert [len(c) for c in again.calls] == [2, 4]  # its evaluation, then only the refinement
    assert search.rounds == 2 and len(search.probes) == 9


def test_a_trial_whose_streams_arrived_bunched_is_marked() -> None:
    """A row says when a trial's chunks reached the client in bursts (its latencies are the
    client's scheduling): the CLI warns about such trials."""

    class Bunched(QueueFake):
        def answer(self, config, requests, load, index):
            records = []
            for r in requests:  # first chunk on time, the rest all at once 0.5 s later
                chunks = (r.arrival_s + 0.01, *([r.arrival_s + 0.5] * (r.output_tokens - 1)))
                records.append(RequestRecord(r.request_id, r.arrival_s, r.arrival_s, chunks,
                                             chunks[-1], r.prompt_tokens, r.output_tokens))
            return Run(tuple(records), max(c.end_s for c in records), 1)

    row, _ = _evaluator(Bunched(), "p99_ttft=1s").evaluate(ServingConfig())
    assert row.facts["bunched_streams"] is True
    calm, _ = _evaluator(QueueFake(), "p99_ttft=1s").evaluate(ServingConfig())
    assert "bunched_streams" not in calm.facts
