"""The simulator's compact token times read as the tuple they stand for, and many of them over
one array read as arrays with each step counted."""

from __future__ import annotations

import pickle
from itertools import pairwise

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


def test_spans_read_the_members_over_one_array_and_count_each_step() -> None:
    seqs = [StepTimes(0.25, STEPS, 3, 9), (1.0, 2.0), StepTimes(1.0, STEPS, 9, 9),
            StepTimes(0.0, STEPS.copy(), 0, 2), StepTimes(2.0, STEPS, 0, 4),
            StepTimes(7.0, STEPS, 50, 51)]
    spans = StepTimes.spans(seqs)
    assert spans is not None and spans.steps is STEPS
    assert spans.index.tolist() == [0, 2, 4, 5]  # the tuple and the other array's are left
    assert spans.first.tolist() == [0.25, 1.0, 2.0, 7.0]
    members = [seqs[i] for i in spans.index]
    # Each step's time as often as the members carry it, each gap as often as they span it.
    at_step = [sum(STEPS[k] in tuple(m)[1:] for m in members) for k in range(STEPS.size)]
    assert spans.step_counts().tolist() == at_step
    between = [sum(STEPS[k] in tuple(m)[1:] and STEPS[k + 1] in tuple(m)[1:] for m in members)
               for k in range(STEPS.size - 1)]
    assert spans.step_counts(gaps=True).tolist() == between
    assert StepTimes.spans([(1.0, 2.0), (3.0,)]) is None
