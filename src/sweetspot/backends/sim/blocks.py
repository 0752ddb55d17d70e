"""The KV block pool with vLLM V1's prefix cache (``vllm/v1/core/block_pool.py``).

Invariant: every block is either referenced by at least one running request or sits in the free
queue; a free block may still carry the hash of the full block it last held, and is then also
in the cache map until it is handed out again (evicted). Allocation takes blocks from the head of
the free queue (least recently freed first), freeing appends to the tail, and a cache hit on a
free block takes it out of the queue: LRU eviction, as vLLM does it.

Block hashes chain: the hash of block i covers block i's tokens and every block before it, so a
hit on block i implies hits on every block before it.

Only blocks that carry a hash have an identity here (an id from a counter): they alone can be
found again and shared. Every other block (fresh, partly filled, or holding outputs nobody will
hit) is interchangeable with any other, so a request holds such blocks as a count and the free
queue holds them as runs: an entry of the queue is either one hashed block or a run of anonymous
ones. Which anonymous block goes where is not observable, so this is vLLM's LRU order exactly,
at a cost per hashed block and per run rather than per block.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["ANONYMOUS", "BlockPool"]

ANONYMOUS = -1  # a request's block that carries no hash (see the module text)


class BlockPool:
    def __init__(self, num_blocks: int, *, caching: bool) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        # The free queue, head first: hashed block id -> 0, or run key (negative) -> length.
        self._free: OrderedDict[int, int] = OrderedDict()
        self._run_keys = -1  # the next run's key (counts down)
        self._free[self._new_run_key()] = num_blocks
        self._next_id = 0  # the next hashed block's id
        self._refs: dict[int, int] = {}  # hashed block id -> requests referencing it
        self._hash_of: dict[int, int] = {}  # hashed block id -> its hash
        self._cached: dict[int, int] = {}  # block hash -> hashed block id
        self.num_used = 0  # blocks referenced by at least one request
        self.peak_used = 0

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.num_used

    def _new_run_key(self) -> int:
        self._run_keys -= 1
        return self._run_keys

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

    def allocate(self, n: int) -> None:
        """Hand out ``n`` anonymous blocks from the head of the free queue (the caller checked
        ``num_free``); hashed blocks taken on the way are evicted from the cache map."""
        free = self._free
        left = n
        while left:
            key = next(iter(free))
            if key >= 0:  # a hashed block: evicted, it becomes anonymous
                free.popitem(last=False)
                del self._cached[self._hash_of.pop(key)]
                del self._refs[key]
                left -= 1
                continue
            run = free[key]
            if run > left:
                free[key] = run - left
                break
            free.popitem(last=False)
            left -= run
        self.num_used += n
        self.peak_used = max(self.peak_used, self.num_used)

    def register(self, block_hash: int) -> int:
        """Give one of a request's anonymous blocks, just filled, its hash: the id it is cached
        under, or ``ANONYMOUS`` when another block holds that hash already (first writer wins,
        as in vLLM)."""
        if not self.caching or block_hash in self._cached:
            return ANONYMOUS
        block = self._next_id
        self._next_id += 1
        self._cached[block_hash] = block
        self._hash_of[block] = block_hash
        self._refs[block] = 1
        return block

    def free(self, blocks: list[int], num_anonymous: int) -> None:
        """Drop a request's references: ``blocks`` (hashed ids or ``ANONYMOUS``) followed by
        ``num_anonymous`` anonymous blocks. Unreferenced ones join the free queue's tail, the
        request's last block first (vLLM frees in reverse so tails are evicted before heads)."""
        freed = num_anonymous
        self._append_run(num_anonymous)
        refs, free = self._refs, self._free
        for b in reversed(blocks):
            if b < 0:
                self._append_run(1)
                freed += 1
                continue
            refs[b] -= 1
            if refs[b] == 0:
                free[b] = 0
                freed += 1
        self.num_used -= freed

    def _append_run(self, n: int) -> None:
        """``n`` anonymous blocks join the queue's tail (one entry with a run already there)."""
        if not n:
            return
        free = self._free
        last = next(reversed(free), 0)
        if last < 0:
            free[last] += n
        else:
            free[self._new_run_key()] = n
