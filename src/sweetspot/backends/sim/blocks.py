"""The KV block pool with vLLM V1's prefix cache (``vllm/v1/core/block_pool.py``).

Invariant: every block is either referenced by at least one running request or sits in the free
queue; a free block may still carry the hash of the full block it last held, and is then also
in the cache map until it is handed out again (evicted). Allocation takes blocks from the head of
the free queue (least recently freed first), freeing appends to the tail, and a cache hit on a
free block takes it out of the queue: LRU eviction, as vLLM does it.

Block hashes chain: the hash of block i covers block i's tokens and the hash of block i-1, so a
hit on block i implies hits on every block before it.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["BlockPool"]


class BlockPool:
    def __init__(self, num_blocks: int, *, caching: bool) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._refs = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash -> block id
        self.num_used = 0  # blocks referenced by at least one request
        self.peak_used = 0

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.num_used

    def lookup(self, hashes: list[int], max_blocks: int) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (at most ``max_blocks``)."""
        hits: list[int] = []
        if not self.caching:
            return hits
        cached = self._cached
        for h in hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def evictable_among(self, blocks: list[int]) -> int:
        """How many of ``blocks`` are free (their reuse takes them out of the free count)."""
        refs = self._refs
        return sum(1 for b in blocks if refs[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on cache-hit blocks."""
        refs, free = self._refs, self._free
        for b in blocks:
            if refs[b] == 0:
                del free[b]
                self.num_used += 1
            refs[b] += 1
        self.peak_used = max(self.peak_used, self.num_used)

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks (the caller checked ``num_free``); evicts cached ones it takes."""
        out: list[int] = []
        refs, hash_of = self._refs, self._hash_of
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            h = hash_of[block]
            if h is not None:
                hash_of[block] = None
                if self._cached.get(h) == block:
                    del self._cached[h]
            refs[block] = 1
            out.append(block)
        self.num_used += n
        self.peak_used = max(self.peak_used, self.num_used)
        return out

    def cache(self, block: int, block_hash: int) -> None:
        """Register a full block under its hash (first writer wins, as in vLLM)."""
        if self.caching and self._hash_of[block] is None and block_hash not in self._cached:
            self._hash_of[block] = block_hash
            self._cached[block_hash] = block

    def free(self, blocks: list[int]) -> None:
        """Drop one reference on each block; unreferenced ones join the free queue's tail, the
        request's last block first (vLLM frees in reverse so tails are evicted before heads)."""
        refs, free = self._refs, self._free
        for b in reversed(blocks):
            refs[b] -= 1
            if refs[b] == 0:
                free[b] = None
                self.num_used -= 1
