import numpy as np
import pytest

from sweetspot import SweetspotError
from sweetspot.spec.requests import FIRST_TOKEN_ID, sample_requests
from sweetspot.spec.workload import (
    ArrivalSpec,
    Fixed,
    PrefixSpec,
    PriorityClass,
    WorkloadSpec,
    preset,
)


def spec(**changes):
    base = dict(name="t", prompt=Fixed(kind="fixed", value=100),
                output=Fixed(kind="fixed", value=20), num_requests=2000,
                arrival=ArrivalSpec(process="poisson", rate=50.0))
    return WorkloadSpec(**{**base, **changes})


def test_same_seed_same_requests_in_any_order_of_calls():
    a = sample_requests(preset("chat"), 50, seed=7)
    sample_requests(preset("rag"), 10, seed=1)
    b = sample_requests(preset("chat"), 50, seed=7)
    assert a == b
    assert a != sample_requests(preset("chat"), 50, seed=8)


def test_exact_lengths_and_valid_ids():
    requests = sample_requests(spec(), 100, vocab_size=4096)
    assert all(r.prompt_tokens == 100 and r.output_tokens == 20 for r in requests)
    ids = np.array([i for r in requests for i in r.prompt_token_ids])
    assert ids.min() >= FIRST_TOKEN_ID and ids.max() < 4096


@pytest.mark.parametrize("process, burstiness", [("poisson", 1.0), ("gamma", 0.5),
                                                  ("gamma", 4.0)])
def test_arrival_rate_and_burstiness(process, burstiness):
    requests = sample_requests(spec(arrival=ArrivalSpec(process=process, rate=50.0,
                                                        burstiness=burstiness)))
    times = np.array([r.arrival_s for r in requests])
    gaps = np.diff(times)
    assert times[0] == 0 and np.all(gaps >= 0)
    assert 1 / gaps.mean() == pytest.approx(50.0, rel=0.08)
    # Gamma gaps: coefficient of variation = 1 / sqrt(shape).
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.15)


def test_constant_inf_and_closed():
    constant = sample_requests(spec(arrival=ArrivalSpec(process="constant", rate=10.0)), 5)
    assert [r.arrival_s for r in constant] == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    for process in ("inf", "closed"):
        closed = sample_requests(spec(arrival=ArrivalSpec(process=process, concurrency=4)), 5)
        assert {r.arrival_s for r in closed} == {0.0}
    with pytest.raises(SweetspotError, match="needs a rate"):
        sample_requests(spec(arrival=ArrivalSpec(process="poisson")), 5)


def test_shared_prefixes():
    requests = sample_requests(spec(prefix=PrefixSpec(length=64, num_prefixes=3, share=0.5)),
                               400)
    with_prefix = [r for r in requests if r.prefix_group is not None]
    assert 0.4 < len(with_prefix) / 400 < 0.6
    assert all(r.prompt_tokens == 164 for r in with_prefix)
    assert all(r.prompt_tokens == 100 for r in requests if r.prefix_group is None)
    firsts = {r.prefix_group: r.prompt_token_ids[:64] for r in with_prefix}
    assert len(set(firsts.values())) == 3
    assert all(r.prompt_token_ids[:64] == firsts[r.prefix_group] for r in with_prefix)
    # Beyond the prefix, prompts differ from the first token on.
    tails = {r.prompt_token_ids[64:65] for r in with_prefix}
    assert len(tails) > 100


def test_priority_classes_follow_their_shares():
    classes = (PriorityClass(name="a", priority=0, share=0.25),
               PriorityClass(name="b", priority=5, share=0.75))
    requests = sample_requests(spec(priorities=classes), 2000)
    share = np.mean([r.priority == 5 for r in requests])
    assert share == pytest.approx(0.75, abs=0.04)


def test_prompt_ids_read_as_the_tuple_they_stand_for():
    """Sampled prompts are slices of one array (``TokenIds``); a request holding one equals,
    hashes and pickles as a request holding the tuple."""
    import dataclasses
    import pickle

    (first, second) = sample_requests(spec(), 2, seed=3, vocab_size=4096)
    ids = first.prompt_token_ids
    as_tuple = tuple(ids)
    assert len(ids) == 100 and all(type(i) is int for i in ids)
    assert ids == as_tuple and as_tuple == ids and hash(ids) == hash(as_tuple)
    assert ids[:5] == as_tuple[:5] and ids[-1] == as_tuple[-1]
    assert ids != second.prompt_token_ids
    plain = dataclasses.replace(first, prompt_token_ids=as_tuple)
    assert plain == first and hash(plain) == hash(first)
    again = pickle.loads(pickle.dumps(first))
    assert again == first and list(again.prompt_token_ids) == list(as_tuple)
