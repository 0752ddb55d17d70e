"""A simulated request's token times, held compactly (``RequestRecord.chunk_times_s``).

A simulated request that ran without preemption got its first token at the end of the step that
finished its prompt and every later one at the end of consecutive decode steps: its times are
that first time and a run of the engine's decode-step end times, one array shared by the whole
run. ``StepTimes`` keeps the first time and the run's bounds instead of a tuple of floats (100,000
ShareGPT-like requests hold 18 million token times: 144 MB of tuple slots, and a pass over 18
million Python floats wherever they are pooled). It reads as the tuple it stands for: it
iterates and indexes to floats (a slice is a tuple), compares and hashes as that tuple, and
pickles as one. ``pool`` gathers many at once, for the metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any, overload

import numpy as np
import numpy.typing as npt

__all__ = ["StepTimes"]

Floats = npt.NDArray[np.float64]


class StepTimes(Sequence[float]):
    __slots__ = ("_first", "_start", "_steps", "_stop")

    def __init__(self, first: float, steps: Floats, start: int, stop: int) -> None:
        self._first = first  # the first token's time
        self._steps = steps  # the run's decode-step end times (shared, never written)
        self._start, self._stop = start, stop  # the later tokens': steps[start:stop]

    def __len__(self) -> int:
        return 1 + self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...

    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("StepTimes index out of range")
        index %= n
        return self._first if index == 0 else float(self._steps[self._start + index - 1])

    @property
    def last(self) -> float:
        """``self[-1]``, without the indexing's checks."""
        return float(self._steps[self._stop - 1]) if self._stop > self._start else self._first

    def __iter__(self) -> Iterator[float]:
        return chain((self._first,), self._steps[self._start:self._stop].tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Floats:
        out = np.empty(len(self), dtype=np.float64)
        out[0] = self._first
        out[1:] = self._steps[self._start:self._stop]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepTimes | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))  # elsewhere it is a plain tuple, not the whole run

    @staticmethod
    def pool(seqs: Sequence[Sequence[float]]) -> Floats | None:
        """Every time of ``seqs``, end to end, as ``np.fromiter(chain(*seqs))`` would give
        them; None unless all are ``StepTimes`` over one shared array."""
        if not seqs or not all(type(s) is StepTimes for s in seqs):
            return None
        steps = seqs[0]._steps  # type: ignore[attr-defined]
        if any(s._steps is not steps for s in seqs):  # type: ignore[attr-defined]
            return None
        n = len(seqs)
        first = np.fromiter((s._first for s in seqs), np.float64, n)  # type: ignore[attr-defined]
        start = np.fromiter((s._start for s in seqs), np.int64, n)  # type: ignore[attr-defined]
        stop = np.fromiter((s._stop for s in seqs), np.int64, n)  # type: ignore[attr-defined]
        sizes = stop - start + 1
        heads = np.cumsum(sizes) - sizes  # where each sequence's first time goes
        out = np.empty(int(sizes.sum()), dtype=np.float64)
        out[heads] = first
        # Each run is one slice copy: no index arrays as long as the times themselves.
        for at, lo, hi in zip((heads + 1).tolist(), start.tolist(), stop.tolist(), strict=True):
            out[at:at + hi - lo] = steps[lo:hi]
        return out
