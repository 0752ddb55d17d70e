"""The KV block pool with vLLM V1's prefix cache (``vllm/v1/core/block_pool.py``).

Invariant: every block is either referenced by at least one running request or sits in the free
queue; a free block may still carry the hash of the full block it last held, and is then also
in the cache map until it is handed out again (evicted). Allocation takes blocks from the head of
the free queue (least recently freed first), freeing appends to the tail, and a cache hit on a
free block takes it out of the queue: LRU eviction, as vLLM does it.

Block hashes chain: the hash of block i covers block i's tokens and every block before it, so a
hit on block i implies hits on every block before it.

How it is kept, at a cost per request and per run of blocks rather than per block:

- Only blocks that carry a hash have an identity (an id from a counter, never reused): they
  alone can be found again and shared. Every other block (fresh, partly filled, or holding
  outputs nobody will hit) is interchangeable with any other, so a request holds those as a
  count and the free queue holds them as runs (an entry with a length).
- The hashed blocks a request frees together enter the queue as one segment entry (their ids
  and hashes, in queue order). A cache hit on a free block leaves its id in the segment as a
  stale entry (``_home`` no longer names the segment) rather than cutting the segment; eviction
  skips stale ids. A segment without stale ids is evicted a slice at a time.
- Reference counts are kept only where a block has more than one reference (``_multi_refs``): a
  hashed block is free when it has a home segment, else referenced once unless shared, so a
  request freeing blocks nobody else holds moves them to the queue without visiting each.

- A request's full block may also wait for its hash (``PENDING``, ``skip``: the prefix cache
  decides which, ``prefix_cache``); here it is anonymous until ``register_pending``.

Which anonymous block goes where is not observable, so this is vLLM's LRU order exactly.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

__all__ = ["ANONYMOUS", "PENDING", "BlockPool"]

ANONYMOUS = -1  # a request's block that carries no hash (see the module text)
PENDING = -2  # a request's full block not yet given its hash (``skip``): anonymous till then


class _Segment:
    """Hashed blocks freed together, in queue order; ``ids[:start]`` have left the queue."""

    __slots__ = ("hashes", "ids", "stale", "start")

    def __init__(self, ids: list[int], hashes: list[int]) -> None:
        self.ids, self.hashes = ids, hashes
        self.start = 0
        self.stale = 0  # ids at or after start that were taken by a cache hit since


class BlockPool:
    def __init__(self, num_blocks: int, *, caching: bool) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        # The free queue, head first: key -> anonymous run length, or a segment of hashed blocks.
        self._free: OrderedDict[int, int | _Segment] = OrderedDict()
        self._keys = 0  # the last queue key handed out
        # Hashed block id -> queue key of its segment while it is free, 0 while referenced
        # (an evicted block keeps its last key: nothing asks about it again).
        self._home: list[int] = []
        self._multi_refs: dict[int, int] = {}  # hashed block with several references -> how many
        self._cached: dict[int, int] = {}  # block hash -> hashed block id
        self.num_used = 0  # blocks referenced by at least one request
        self.peak_used = 0
        self._append_run(num_blocks)

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
        home = self._home
        return sum(1 for b in blocks if home[b])

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on cache-hit blocks."""
        home, shared, free = self._home, self._multi_refs, self._free
        for b in blocks:
            key = home[b]
            if not key:
                shared[b] = shared.get(b, 1) + 1
                continue
            home[b] = 0
            segment = free[key]
            assert isinstance(segment, _Segment)
            segment.stale += 1
            if segment.stale == len(segment.ids) - segment.start:
                del free[key]
            self.num_used += 1
        self.peak_used = max(self.peak_used, self.num_used)

    def allocate(self, n: int) -> None:
        """Hand out ``n`` anonymous blocks from the head of the free queue (the caller checked
        ``num_free``); hashed blocks taken on the way are evicted from the cache map."""
        free = self._free
        left = n
        while left:
            key, entry = next(iter(free.items()))
            if isinstance(entry, int):
                if entry > left:
                    free[key] = entry - left
                    break
                left -= entry
            else:
                left = self._evict(key, entry, left)
                if entry.start < len(entry.ids):
                    break
            free.popitem(last=False)
        self.num_used += n
        self.peak_used = max(self.peak_used, self.num_used)

    def _evict(self, key: int, segment: _Segment, want: int) -> int:
        """Evict up to ``want`` of the segment's blocks from its start; returns how many more
        are wanted."""
        start, ids = segment.start, segment.ids
        if not segment.stale:
            end = min(len(ids), start + want)
            deque(map(self._cached.__delitem__, segment.hashes[start:end]), maxlen=0)
            segment.start = end
            return want - (end - start)
        home, cached = self._home, self._cached
        while want and start < len(ids):
            if home[ids[start]] == key:
                del cached[segment.hashes[start]]
                want -= 1
            else:
                segment.stale -= 1
            start += 1
        segment.start = start
        return want

    def register(self, hashes: list[int]) -> Sequence[int]:
        """Give a request's next anonymous blocks, just filled, their hashes: the ids they are
        cached under, ``ANONYMOUS`` where another block holds that hash already (first writer
        wins, as in vLLM)."""
        cached = self._cached
        if not self.caching:
            return [ANONYMOUS] * len(hashes)
        if cached.keys().isdisjoint(hashes):
            size, first = len(cached), len(self._home)
            ids = range(first, first + len(hashes))
            cached.update(zip(hashes, ids, strict=True))
            if len(cached) == size + len(hashes):
                self._home.extend([0] * len(ids))
                return ids
            for h in hashes:  # a hash twice in the list (a collision): one at a time
                cached.pop(h, None)
        return [self._register_one(h) for h in hashes]

    def _register_one(self, block_hash: int) -> int:
        if block_hash in self._cached:
            return ANONYMOUS
        block = self._cached[block_hash] = len(self._home)
        self._home.append(0)
        return block

    def skip(self, hashes: list[int]) -> list[int]:
        """Markers for a request's next blocks, just filled, whose hashes no other request
        carries: ``ANONYMOUS`` where the hash is cached already (first writer wins, as
        ``register`` would have found), else ``PENDING`` (``register_pending`` gives them their
        hashes should the request be preempted and want them back)."""
        cached = self._cached
        if not self.caching:
            return [ANONYMOUS] * len(hashes)
        if cached.keys().isdisjoint(hashes):
            return [PENDING] * len(hashes)
        return [ANONYMOUS if h in cached else PENDING for h in hashes]

    def register_pending(self, blocks: list[int], hashes: list[int]) -> None:
        """Register the request's ``PENDING`` blocks now, in place (block i's hash is
        ``hashes[i]``)."""
        for i, b in enumerate(blocks):
            if b == PENDING:
                blocks[i] = self._register_one(hashes[i])

    def free(self, blocks: list[int], hashes: list[int] | None, num_anonymous: int) -> None:
        """Drop a request's references: ``blocks`` (hashed ids, ``ANONYMOUS`` or ``PENDING``;
        block i's hash is ``hashes[i]``) followed by ``num_anonymous`` anonymous blocks.
        Unreferenced ones join the free queue's tail, the request's last block first (vLLM
        frees in reverse so tails are evicted before heads)."""
        k = len(blocks)  # hashed ids first, then blocks without a hash: the usual shape
        if blocks and max(blocks) < 0:
            k = 0
        while k and blocks[k - 1] < 0:
            k -= 1
        tail = num_anonymous + len(blocks) - k
        self._append_run(tail)
        self.num_used -= tail
        if not k:
            return
        assert hashes is not None
        head = blocks[:k] if k < len(blocks) else blocks
        if min(head) >= 0 and self._multi_refs.keys().isdisjoint(head):
            # Its own blocks, shared with nobody: all of them go, as one segment.
            self._append_segment(head[::-1], hashes[k - 1::-1])
            self.num_used -= k
            return
        blocks = head
        shared = self._multi_refs
        ids: list[int] = []
        segment_hashes: list[int] = []
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            if b < 0:
                self._append_segment(ids, segment_hashes)
                ids, segment_hashes = [], []
                self._append_run(1)
                self.num_used -= 1
            elif b in shared:
                shared[b] -= 1
                if shared[b] == 1:
                    del shared[b]
            else:
                ids.append(b)
                segment_hashes.append(hashes[i])
                self.num_used -= 1
        self._append_segment(ids, segment_hashes)

    def _append_segment(self, ids: list[int], hashes: list[int]) -> None:
        if not ids:
            return
        self._keys += 1
        key = self._keys
        self._free[key] = _Segment(ids, hashes)
        home = self._home
        if ids == list(range(ids[0], ids[0] - len(ids), -1)):  # registered together
            home[ids[-1]:ids[0] + 1] = [key] * len(ids)
        else:
            for b in ids:
                home[b] = key

    def _append_run(self, n: int) -> None:
        """``n`` anonymous blocks join the queue's tail (one entry with a run already there)."""
        if not n:
            return
        free = self._free
        if free:
            key, entry = next(reversed(free.items()))
            if isinstance(entry, int):
                free[key] = entry + n
                return
        self._keys += 1
        free[self._keys] = n
