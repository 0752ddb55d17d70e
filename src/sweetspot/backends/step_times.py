"""A simulated request's token times, held compactly (``RequestRecord.chunk_times_s``).

A simulated request that ran without preemption got its first token at the end of the step that
finished its prompt and every later one at the end of consecutive decode steps: its times are
that first time and a run of the engine's decode-step end times, one array shared by the whole
run. ``StepTimes`` keeps the first time and the run's bounds instead of a tuple of floats (100,000
ShareGPT-like requests hold 18 million token times: 144 MB of tuple slots, and a pass over 18
million Python floats wherever they are pooled). It reads as the tuple it stands for: it
iterates and indexes to floats (a slice is a tuple), compares and hashes as that tuple, and
pickles as one. ``spans`` reads many at once as arrays, for the metrics: they count each step's
time once with its multiplicity instead of pooling 18 million copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, overload

import numpy as np
import numpy.typing as npt

__all__ = ["Spans", "StepTimes"]

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
    def spans(seqs: Sequence[Sequence[float]]) -> Spans | None:
        """The members of ``seqs`` that are ``StepTimes`` over the first one's shared array, as
        arrays (their positions in ``seqs``, first times, run bounds); None if there is none."""
        steps = next((s._steps for s in seqs if type(s) is StepTimes), None)
        if steps is None:
            return None
        members = [(i, s) for i, s in enumerate(seqs)
                   if type(s) is StepTimes and s._steps is steps]
        n = len(members)
        return Spans(
            steps,
            np.fromiter((i for i, _ in members), np.intp, n),
            np.fromiter((s._first for _, s in members), np.float64, n),
            np.fromiter((s._start for _, s in members), np.intp, n),
            np.fromiter((s._stop for _, s in members), np.intp, n),
        )


@dataclass(frozen=True, slots=True)
class Spans:
    """Many ``StepTimes`` over one shared array (``StepTimes.spans``): member ``j`` is
    ``seqs[index[j]]``, its times ``first[j]`` then ``steps[start[j]:stop[j]]``."""

    steps: Floats
    index: npt.NDArray[np.intp]
    first: Floats
    start: npt.NDArray[np.intp]
    stop: npt.NDArray[np.intp]

    def step_counts(self, *, gaps: bool = False) -> npt.NDArray[np.int64]:
        """How many members have a time at each step (``steps[k]``); with ``gaps``, how many
        have the gap from step k to step k + 1 (times at both)."""
        start, stop = self.start, self.stop - 1 if gaps else self.stop
        kept = stop > start
        size = self.steps.size + 1
        opened = np.bincount(start[kept], minlength=size)
        closed = np.bincount(stop[kept], minlength=size)
        return np.cumsum(opened - closed)[:self.steps.size - 1 if gaps else self.steps.size]
