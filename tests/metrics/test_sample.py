"""A counted multiset's statistics are numpy's over the values written out."""

import numpy as np
import pytest

from sweetspot.metrics.sample import Sample


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_sample_statistics_are_numpys_bit_for_bit(n):
    rng = np.random.default_rng(n)
    values = rng.lognormal(-3, 1.5, n)
    counts = rng.integers(1, 5, n)
    written = np.repeat(values, counts)
    qs = [0, 1, 25, 50, 90, 95, 99, 99.9, 100]
    for sample, plain in ((Sample(values.copy()), values), (Sample(values, counts), written)):
        assert sample.quantiles(qs).tolist() == np.percentile(plain, qs).tolist()
        assert sample.median() == np.median(plain)
        mean, std = sample.mean_std()
        assert mean == pytest.approx(np.mean(plain), rel=1e-13)
        assert std == pytest.approx(np.std(plain), rel=1e-12)
