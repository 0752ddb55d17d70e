"""The simulator's compact token times read as the tuple they stand for, and pool as
``np.fromiter(chain(...))`` would."""

from __future__ import annotations

import pickle
from itertools import chain, pairwise

import numpy as np
import pytest

from sweetspot.backends.records import RequestRecord
from sweetspot.backends.step_times import StepTimes

STEPS = np.arange(100.0) * 1.5 + 0.125


def test_reads_compares_hashes_and_pickles_as_its_tuple() -> None:
    times = StepTimes(0.25, STEPS, 3, 9)
    plain = (0.25, *STEPS[3:9].tolist())
    assert len(times) == 7 and tuple(times) == plain and list(times) == list(plain)
    assert times == plain and plain == times and hash(times) == hash(plain)
    assert times[0] == 0.25 and times[-1] == plain[-1] == times.last
    assert times[1:3] == plain[1:3] and StepTimes(0.5, STEPS, 4, 4).last == 0.5
    assert all(type(t) is float for t in times)
    with pytest.raises(IndexError):
        times[7]
    assert np.array_equal(np.asarray(times, dtype=float), np.array(plain))
    assert pickle.loads(pickle.dumps(times)) == plain
    record = RequestRecord(0, 0.0, 0.0, times, times[-1], 10, 7)
    assert record == RequestRecord(0, 0.0, 0.0, plain, plain[-1], 10, 7)
    assert record.itls_s == tuple(b - a for a, b in pairwise(plain))


def test_pool_gathers_what_chaining_them_gives() -> None:
    seqs = [StepTimes(0.25, STEPS, 3, 9), StepTimes(1.0, STEPS, 9, 9),
            StepTimes(2.0, STEPS, 0, 4), StepTimes(7.0, STEPS, 50, 51)]
    pooled = StepTimes.pool(seqs)
    assert pooled is not None
    assert np.array_equal(pooled, np.fromiter(chain.from_iterable(seqs), float))
    assert StepTimes.pool([*seqs, (1.0, 2.0)]) is None  # a tuple among them: chain instead
    assert StepTimes.pool([StepTimes(0.0, STEPS.copy(), 0, 2), *seqs]) is None
