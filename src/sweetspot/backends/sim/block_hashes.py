"""Prefix-cache hashes of every prompt's full blocks, computed for a whole run at once.

What a hash must mean (vLLM's block hash chain): the hash of block i of a prompt stands for the
prompt's first ``(i + 1) * block_size`` token ids, so two prompts' block i hashes are equal
exactly when they share every token up to the end of that block; the scheduler relies on it (a
hit on block i implies hits on every block before it). Here:

- a block's content sum is ``sum(id_j * M(j))`` over its tokens (mod 2**64), ``M(j)`` a fixed
  pseudo-random odd multiplier of the position j within the block: two different blocks have
  equal sums with a probability of about 2**-46 at worst (a difference of ids times an
  independent random odd multiplier);
- a block's key mixes (splitmix64) its content sum with its index in the prompt;
- block i's hash is the sum of the keys of blocks 0..i (mod 2**64): equal prefixes give equal
  hashes, and unequal ones collide only by chance (~2**-64), as Python's tuple hashes did.

The values themselves are never observable, only which ones are equal. Blocks that hold output
tokens are unique to their request and are hashed where they fill (``hash_chain``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from sweetspot.backends.sim.request import SimRequest
from sweetspot.spec.token_ids import TokenIds

__all__ = ["Expected", "expect_prompts", "hash_chain", "index_prompts", "prompt_block_hashes"]

U64 = npt.NDArray[np.uint64]
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: U64) -> U64:
    """splitmix64's finaliser: every input bit moves every output bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def prompt_block_hashes(prompts: Sequence[Sequence[int]], block_size: int) -> list[U64]:
    """For each prompt, the hashes of its full blocks (``len // block_size`` of them): views of
    one array (``_run_hashes``)."""
    hashes, ends = _run_hashes(prompts, block_size)
    return [hashes[a:b] for a, b in pairwise([0, *ends.tolist()])]


def _run_hashes(prompts: Sequence[Sequence[int]], block_size: int
                ) -> tuple[U64, npt.NDArray[np.int64]]:
    """Every prompt's full-block hashes end to end, and where each prompt's end; filled a
    group of prompts at a time (the temporaries stay a few MB whatever the run's size: 100,000
    prompts hold 1.25 million blocks)."""
    lengths = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
    blocks = lengths // block_size
    ends = np.cumsum(blocks)  # each prompt's blocks end here in the run's
    if not blocks.any():
        return np.empty(0, dtype=np.uint64), ends
    ids, starts = _token_array(prompts, lengths)
    windows = sliding_window_view(ids, block_size)
    multipliers = _mix(np.arange(1, block_size + 1, dtype=np.uint64) * GOLDEN) | np.uint64(1)
    hashes = np.empty(int(ends[-1]), dtype=np.uint64)
    lo = 0
    while lo < len(prompts):
        done = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, done + _CHUNK, side="right")))
        if ends[hi - 1] > done:
            hashes[done:ends[hi - 1]] = _group_hashes(windows, starts[lo:hi], blocks[lo:hi],
                                                      block_size, multipliers)
        lo = hi
    return hashes, ends


def _group_hashes(windows: npt.NDArray[Any], starts: npt.NDArray[np.int64],
                  blocks: npt.NDArray[np.int64], block_size: int, multipliers: U64) -> U64:
    """The block hashes of a group of prompts (at least one block among them), end to end."""
    owner = np.repeat(np.arange(len(blocks)), blocks)  # the prompt of each block
    first_block = np.cumsum(blocks) - blocks
    index = np.arange(len(owner)) - first_block[owner]  # each block's index in its prompt
    sums = windows[starts[owner] + index * block_size].astype(np.uint64) @ multipliers
    keys = _mix(sums + index.astype(np.uint64) * GOLDEN)
    running = np.cumsum(keys)
    before = np.where(first_block > 0, running[np.maximum(first_block - 1, 0)], np.uint64(0))
    return running - before[owner]


_CHUNK = 1 << 16  # blocks hashed at a time (their uint64 products stay small)


def _token_array(prompts: Sequence[Sequence[int]], lengths: npt.NDArray[np.int64]
                 ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """One array holding every prompt's ids, and where each prompt starts in it. Sampled
    prompts (``TokenIds``) are spans of one array already: that one, without a copy."""
    spans = TokenIds.spans(prompts)
    if spans is not None:
        return spans
    return (np.concatenate([np.asarray(p) for p in prompts]),
            np.cumsum(lengths) - lengths)


@dataclass(slots=True)
class Expected:
    """A run's prompts hashed before the first arrives (``expect_prompts``): prompt ``i`` (by
    object) has the hashes ``hashes[starts[i]:ends[i]]``, the first ``leading[i]`` of them
    carried by another prompt too; ``shared`` holds those hashes. Each prompt is taken as often
    as it was expected (``take``), after which its entry is gone."""

    position: dict[int, int]  # id(prompt) -> i
    repeats: dict[int, int]  # id(prompt) -> times it is expected beyond the first
    hashes: U64
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    leading: npt.NDArray[np.int64]
    shared: set[int]

    def __contains__(self, prompt: object) -> bool:
        return id(prompt) in self.position

    def take(self, prompt: object) -> int | None:
        """The prompt's index, counting one of its expected uses; None if it is not expected."""
        key = id(prompt)
        i = self.position.get(key)
        if i is None:
            return None
        if self.repeats.get(key):
            self.repeats[key] -= 1
        else:
            del self.position[key]
            if not self.position:
                self.position.clear()  # an emptied dict keeps its table until cleared
        return i


def index_prompts(reqs: Iterable[SimRequest], block_size: int,
                  known: Expected | None = None) -> None:
    """Give each request its prompt's block hashes (``SimRequest.prompt_hashes``) and how many
    of them lead with a hash another prompt carries (``n_shared``): from ``known`` where it has
    the prompt; a prompt it lacks is hashed here and counts as all shared."""
    missing = []
    for req in reqs:
        i = known.take(req.prompt_ids) if known is not None else None
        if i is None:
            missing.append(req)
        else:
            assert known is not None
            req.prompt_hashes = known.hashes[known.starts[i]:known.ends[i]]
            req.n_shared = int(known.leading[i])
    hashes = prompt_block_hashes([r.prompt_ids for r in missing], block_size) if missing else []
    for req, prompt_hashes in zip(missing, hashes, strict=True):
        req.prompt_hashes, req.n_shared = prompt_hashes, len(prompt_hashes)


def expect_prompts(prompts: Sequence[Sequence[int]], block_size: int) -> Expected:
    """Every prompt's block hashes with how many of them lead with a shared hash, and the
    shared hashes: those more than one of ``prompts`` carries (a prompt sent twice appears
    twice), the only ones a request can find that another put in the cache."""
    pooled, ends = _run_hashes(prompts, block_size)
    ordered = np.sort(pooled)
    # Hashes seen twice or more, once each (sorted, so a run's first; np.unique and np.isin
    # would import numpy.ma, 9 ms of a 0.5 s process).
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    del ordered
    repeated = twice[np.append(True, twice[1:] != twice[:-1])] if twice.size else twice
    starts = ends - np.diff(ends, prepend=0)
    leading = np.zeros(len(prompts), dtype=np.int64)
    if repeated.size:  # leading shared blocks per prompt: up to its first block of its own
        at = np.minimum(np.searchsorted(repeated, pooled), repeated.size - 1)
        own = np.flatnonzero(repeated[at] != pooled)
        first_own = np.append(own, len(pooled))[np.searchsorted(own, starts)]
        leading = np.minimum(first_own - starts, ends - starts)
    position: dict[int, int] = {}
    repeats: dict[int, int] = {}
    for i, p in enumerate(prompts):
        key = id(p)
        if key in position:  # the same prompt object sent again (a warm-up's copy)
            repeats[key] = repeats.get(key, 0) + 1
        position[key] = i
    return Expected(position, repeats, pooled, starts, ends, leading, set(repeated.tolist()))


def hash_chain(req: SimRequest, block_size: int, upto_blocks: int) -> list[int]:
    """The request's full-block hashes, at least its first ``upto_blocks`` (while blocks that
    far are full): its prompt's, then for blocks holding outputs values unique to the request
    (chained on the last prompt block's, as vLLM chains every block on its parent)."""
    hashes = req.hashes
    if hashes is None:
        if req.prompt_hashes is None:
            index_prompts([req], block_size)
        assert req.prompt_hashes is not None
        hashes = req.hashes = req.prompt_hashes.tolist()
    parent = hashes[-1] if hashes else 0
    for i in range(len(hashes), upto_blocks):
        parent = hash((parent, (-1, req.rid, i)))
        hashes.append(parent)
    return hashes
