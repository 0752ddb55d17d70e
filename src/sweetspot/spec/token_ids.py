"""A prompt's token ids, held compactly.

A run's prompts are drawn as one array (``sample_requests``); each request's ids are a span of
it (the array and the span's bounds). As tuples of Python ints, 100,000 ShareGPT-like prompts
would take about 800 MB; as spans of one int32 array they take 80 MB. A ``TokenIds`` reads as
the tuple it stands for: it iterates, indexes and slices to Python ints (a slice is a tuple),
and compares and hashes as that tuple, so a ``Request`` holding one equals a ``Request``
holding the tuple. ``spans`` hands the simulator a run's array as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

__all__ = ["TokenIds"]


class TokenIds(Sequence[int]):
    __slots__ = ("_base", "_hash", "_start", "_stop")

    def __init__(self, base: npt.NDArray[np.integer[Any]], start: int = 0,
                 stop: int | None = None) -> None:
        self._base = base  # one-dimensional; nobody writes to it afterwards
        self._start = start
        self._stop = len(base) if stop is None else stop
        self._hash: int | None = None

    @property
    def _ids(self) -> npt.NDArray[np.integer[Any]]:
        return self._base[self._start:self._stop]

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return tuple(self._ids[index].tolist())
        return int(self._ids[index])

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        ids = self._ids if dtype is None else self._ids.astype(dtype, copy=False)
        return ids.copy() if copy else ids

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenIds):
            return len(self) == len(other) and bool(np.array_equal(self._ids, other._ids))
        if isinstance(other, tuple):
            return len(self) == len(other) and tuple(self._ids.tolist()) == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._ids.tolist()))
        return self._hash

    def __repr__(self) -> str:
        return f"TokenIds({self._ids.tolist()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenIds, (np.array(self._ids),))  # its own ids, not the whole run's array

    @staticmethod
    def spans(prompts: Sequence[Sequence[int]]
              ) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.int64]] | None:
        """(the array, where each prompt starts in it) when every prompt is a ``TokenIds`` of
        one array, so a run's prompts can be read without copying; else None."""
        if not prompts or not all(type(p) is TokenIds for p in prompts):
            return None
        base = prompts[0]._base  # type: ignore[attr-defined]
        if any(p._base is not base for p in prompts):  # type: ignore[attr-defined]
            return None
        starts = np.fromiter((p._start for p in prompts), np.int64,  # type: ignore[attr-defined]
                             len(prompts))
        return base, starts
