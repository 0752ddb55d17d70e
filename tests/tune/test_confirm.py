"""The finalists' paired verdict on synthetic runs whose truth is known."""

from __future__ import annotations

import numpy as np

from sweetspot.tune.confirm import paired_ratio_interval, verdict_of, welch_interval

PAIRS = 8  # the simulated study's default: its own run and --confirm 7 more


def _runs(seed: int, effect: float, noise: float = 0.03) -> tuple[list[float], list[float]]:
    """A and B on the same seeds: a shared per-pair factor (the draw and the machine's drift,
    ±20 %) and B = A x (1 + effect ± noise)."""
    rng = np.random.default_rng(seed)
    shared = 2000 * rng.uniform(0.8, 1.2, PAIRS)
    a = shared * (1 + 0.01 * rng.standard_normal(PAIRS))
    b = a * (1 + effect + noise * rng.standard_normal(PAIRS))
    return list(a), list(b)


def test_b_five_percent_better_wins_in_nine_of_ten() -> None:
    wins = 0
    for seed in range(40):
        a, b = _runs(seed, 0.05)
        verdict = verdict_of(a, b, (0, 1))
        wins += verdict.verdict == "winner" and verdict.numbers == (1, 0)
        assert verdict.numbers[0] == 1 or verdict.verdict == "tie"  # never A
    assert wins >= 36


def test_identical_finalists_tie_in_nineteen_of_twenty() -> None:
    ties = sum(verdict_of(*_runs(seed, 0.0), (0, 1)).verdict == "tie" for seed in range(40))
    assert ties >= 38


def test_pairing_sees_what_welch_cannot() -> None:
    """As on the H100: 1024 beat 128 in every repeat (+256, +669, +560, +450 tok/s) while the
    repeats moved together by thousands; Welch's interval straddles zero, the paired one
    does not."""
    a = [7_000.0, 9_300.0, 5_900.0, 6_500.0]
    b = [x + d for x, d in zip(a, (256.0, 669.0, 560.0, 450.0), strict=True)]
    _, low, high = welch_interval(b, a)
    assert low < 0 < high
    ratio, low, high = paired_ratio_interval(b, a)
    assert 0 < low < ratio < high
    assert verdict_of(b, a, (6, 2)).verdict == "winner"


def test_a_failed_run_is_dropped_and_counted() -> None:
    verdict = verdict_of([100.0, 0.0, 101.0, 99.0], [90.0, 95.0, 91.0, 90.0], (0, 1))
    assert verdict.failed_pairs == 1 and len(verdict.samples[0]) == 4
