"""Many requests' chunk times, read for the metrics: each request's first time and count, all
the times as a ``Sample``, and the gaps within each request (the ITLs) as another."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from sweetspot.backends.step_times import StepTimes
from sweetspot.metrics.sample import Sample

__all__ = ["Chunks", "gaps_within"]

_SLICE = 1 << 20  # chunk times differenced at a time


@dataclass(frozen=True, slots=True)
class Chunks:
    """The chunk times of many requests: each one's first and count, all of them as a
    ``Sample``, and the gaps within each request pooled. Plain sequences are written out;
    the simulator's ``StepTimes`` over one shared array are counted per step instead."""

    first: np.ndarray  # per request
    per_request: np.ndarray  # chunks per request
    times: Sample
    gaps: Sample

    @classmethod
    def of(cls, seqs: Sequence[Sequence[float]]) -> Chunks:
        n = len(seqs)
        first = np.empty(n)
        per_request = np.empty(n, dtype=np.int64)
        spans = StepTimes.spans(seqs)
        unspanned = np.ones(n, dtype=bool)
        times: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        gaps: list[np.ndarray] = []
        gap_counts: list[np.ndarray] = []
        if spans is not None:
            first[spans.index] = spans.first
            per_request[spans.index] = spans.stop - spans.start + 1
            unspanned[spans.index] = False
            at_step = spans.step_counts()
            between = spans.step_counts(gaps=True)
            later = spans.stop > spans.start
            times += [spans.first, spans.steps[at_step > 0]]
            counts += [np.ones(spans.first.size, np.int64), at_step[at_step > 0]]
            gaps += [spans.steps[spans.start[later]] - spans.first[later],
                     np.diff(spans.steps)[between > 0]]
            gap_counts += [np.ones(int(later.sum()), np.int64), between[between > 0]]
        plain = np.flatnonzero(unspanned).tolist()
        sizes = np.fromiter((len(seqs[i]) for i in plain), np.int64, len(plain))
        written = np.fromiter(chain.from_iterable(seqs[i] for i in plain), float,
                              int(sizes.sum()))
        heads = np.cumsum(sizes) - sizes  # where each plain request's chunks start
        first[plain] = written[heads]
        per_request[plain] = sizes
        times.append(written)
        counts.append(np.ones(written.size, np.int64))
        gaps.append(gaps_within(written.copy(), heads))
        gap_counts.append(np.ones(gaps[-1].size, np.int64))
        if spans is None:  # nothing counted: the plain arrays themselves
            return cls(first, per_request, Sample(written), Sample(gaps[-1]))
        return cls(first, per_request, Sample(np.concatenate(times), np.concatenate(counts)),
                   Sample(np.concatenate(gaps), np.concatenate(gap_counts)))


def gaps_within(chunks: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``np.diff(chunks)`` less the gap from each request's last chunk to the next one's first
    (``first``: where each request's chunks start), written over ``chunks`` itself a slice at a
    time: 18 million chunk times would otherwise take two more arrays of their size. A slice
    reads ``chunks[lo:hi + 1]`` and writes at or before ``lo``, so nothing is overwritten
    before it is read."""
    across = first[1:] - 1  # positions of the gaps between requests, ascending
    written = 0
    for lo in range(0, max(chunks.size - 1, 0), _SLICE):
        hi = min(lo + _SLICE, chunks.size - 1)
        gaps = chunks[lo + 1:hi + 1] - chunks[lo:hi]
        cut = across[np.searchsorted(across, lo):np.searchsorted(across, hi)] - lo
        kept = np.delete(gaps, cut) if cut.size else gaps
        chunks[written:written + kept.size] = kept
        written += kept.size
    return chunks[:written]
