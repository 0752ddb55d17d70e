"""Prefix-cache hashes of every prompt's full blocks, computed for a whole run at once.

What a hash must mean (vLLM's block hash chain): the hash of block i of a prompt stands for the
prompt's first ``(i + 1) * block_size`` token ids, so two prompts' block i hashes are equal
exactly when they share every token up to the end of that block; the scheduler relies on it (a
hit on block i implies hits on every block before it). Here that is a prefix sum: token j of a
prompt contributes ``id_j * M(j)`` (mod 2**64), where ``M(j)`` is a fixed pseudo-random odd
multiplier of the position, and block i's hash is the sum over its prompt's first
``(i + 1) * block_size`` tokens. Equal prefixes give equal sums; unequal ones collide with a
probability of about 2**-46 at worst (a difference of ids times an independent random odd
multiplier), as good as Python's tuple hashes were for this. The values themselves are never
observable, only which ones are equal.

Blocks that hold output tokens are unique to their request and are hashed where they fill
(``Scheduler._hash_chain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import numpy.typing as npt

__all__ = ["prompt_block_hashes"]

U64 = npt.NDArray[np.uint64]


def _multipliers(n: int) -> U64:
    """``M(j)`` for positions ``0 .. n-1``: splitmix64 of the position, made odd."""
    z = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x5EED)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def prompt_block_hashes(prompts: Sequence[Sequence[int]], block_size: int
                        ) -> list[U64]:
    """For each prompt, the hashes of its full blocks (``len // block_size`` of them)."""
    lengths = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
    if not len(prompts) or not lengths.any():
        return [np.empty(0, dtype=np.uint64) for _ in prompts]
    ids = np.concatenate([np.asarray(p) for p in prompts]).astype(np.uint64)
    starts = np.cumsum(lengths) - lengths
    # Each token's position in its prompt: a running count that restarts at every prompt.
    steps = np.ones(len(ids), dtype=np.int64)
    nonempty = lengths > 0
    steps[starts[nonempty][1:]] = 1 - lengths[nonempty][:-1]
    steps[0] = 0
    positions = np.cumsum(steps)
    sums = np.cumsum(ids * _multipliers(int(lengths.max()))[positions])
    # Block i of prompt r ends at token starts[r] + (i + 1) * block_size - 1; its hash is the
    # running sum there less the sum before the prompt.
    blocks = lengths // block_size
    owner = np.repeat(np.arange(len(prompts)), blocks)
    first_block = np.cumsum(blocks) - blocks
    index = np.arange(int(blocks.sum()), dtype=np.int64) - np.repeat(first_block, blocks)
    ends = starts[owner] + (index + 1) * block_size - 1
    before = np.concatenate((np.zeros(1, dtype=np.uint64), sums))[starts]
    hashes = sums[ends] - before[owner]
    bounds = np.concatenate(([0], np.cumsum(blocks))).tolist()
    return [hashes[lo:hi] for lo, hi in pairwise(bounds)]
