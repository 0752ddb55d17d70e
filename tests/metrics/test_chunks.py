"""Many requests' chunk times read for the metrics: the gaps within each request."""

import numpy as np
import pytest


@pytest.mark.parametrize("slice_size", [1, 3, 7, 1 << 20])
def test_itls_are_computed_in_place_as_the_gaps_within_requests(monkeypatch, slice_size):
    from sweetspot.metrics import chunks as module

    monkeypatch.setattr(module, "_SLICE", slice_size)
    rng = np.random.default_rng(5)
    counts = rng.integers(1, 6, size=40)
    chunks = np.cumsum(rng.random(int(counts.sum())))
    first = np.cumsum(counts) - counts
    within = np.ones(chunks.size - 1, dtype=bool)
    within[first[1:] - 1] = False
    expected = np.diff(chunks)[within]
    assert np.array_equal(module.gaps_within(chunks.copy(), first), expected)
