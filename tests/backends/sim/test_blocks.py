"""The block pool keeps vLLM's LRU eviction exactly while it counts anonymous blocks and moves
hashed ones in runs: random request lifetimes against a block-by-block reference pool (the
simulator's earlier one), comparing which hashes stay cached after every operation."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from sweetspot.backends.sim.blocks import ANONYMOUS, BlockPool


class ReferencePool:
    """One entry per block, as ``vllm/v1/core/block_pool.py`` keeps them."""

    def __init__(self, num_blocks: int) -> None:
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.refs = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}

    def lookup(self, hashes: list[int]) -> list[int]:
        hits = []
        for h in hashes:
            if h not in self.cached:
                break
            hits.append(self.cached[h])
        return hits

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.refs[b] == 0:
                del self.free_queue[b]
            self.refs[b] += 1

    def allocate(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)
            h = self.hash_of[block]
            if h is not None:
                self.hash_of[block] = None
                del self.cached[h]
            self.refs[block] = 1
            out.append(block)
        return out

    def cache(self, block: int, h: int) -> None:
        if self.hash_of[block] is None and h not in self.cached:
            self.hash_of[block], self.cached[h] = h, block

    def free(self, blocks: list[int]) -> None:
        for b in reversed(blocks):
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self.free_queue[b] = None


@pytest.mark.parametrize("seed", range(12))
def test_random_lifetimes_evict_what_vllm_evicts(seed: int) -> None:
    rng = random.Random(seed)
    num_blocks = rng.choice([24, 60, 200])
    ref, pool = ReferencePool(num_blocks), BlockPool(num_blocks, caching=True)
    # Prompts drawn from a few stems, so requests share leading blocks (hits, shared blocks).
    stems = [[rng.randrange(10**9) for _ in range(12)] for _ in range(4)]
    running: list[dict] = []
    for _ in range(400):
        if running and (rng.random() < 0.45 or len(running) > 6):
            req = running.pop(rng.randrange(len(running)))
            extra = rng.randrange(req["anonymous"] + 1)  # blocks that fill before it goes
            ref.free(req["ref_blocks"] if not extra else _ref_register(ref, req, extra))
            first = len(req["blocks"])
            filled = req["hashes"][first:first + extra]
            pool.free(req["blocks"] + list(pool.register(filled)), req["hashes"],
                      req["anonymous"] - len(filled))
        else:
            stem = rng.choice(stems)
            length = rng.randrange(1, 12)
            shared = rng.randrange(length + 1)
            hashes = stem[:shared] + [rng.randrange(10**9) for _ in range(length - shared)]
            ref_hits, hits = ref.lookup(hashes), pool.lookup(hashes, len(hashes))
            assert len(ref_hits) == len(hits)
            need = length - len(hits) + rng.randrange(3)
            free_now = len(ref.free_queue) - sum(ref.refs[b] == 0 for b in ref_hits)
            assert pool.num_free - pool.evictable_among(hits) == free_now
            if need > free_now:
                continue
            ref.touch(ref_hits)
            pool.touch(hits)
            pool.allocate(need)
            running.append({"ref_blocks": ref_hits + ref.allocate(need), "blocks": hits,
                            "hashes": hashes, "anonymous": need})
        assert pool.num_free == len(ref.free_queue)
        assert set(pool._cached) == set(ref.cached)


def _ref_register(ref: ReferencePool, req: dict, extra: int) -> list[int]:
    first = len(req["blocks"])
    for i in range(first, min(first + extra, len(req["hashes"]))):
        ref.cache(req["ref_blocks"][i], req["hashes"][i])
    return req["ref_blocks"]


def test_a_hash_twice_among_new_blocks_is_registered_once() -> None:
    pool = BlockPool(8, caching=True)
    pool.allocate(3)
    assert list(pool.register([5, 6, 5])) == [0, 1, ANONYMOUS]
    assert pool.lookup([5, 6], 2) == [0, 1]


def test_without_a_prefix_cache_every_block_is_anonymous() -> None:
    pool = BlockPool(10, caching=False)
    pool.allocate(4)
    assert list(pool.register([1, 2])) == [ANONYMOUS, ANONYMOUS]
    assert pool.lookup([1, 2], 2) == [] and pool.num_free == 6


def test_block_hashes_are_equal_exactly_where_prompts_share_every_token_so_far() -> None:
    from sweetspot.backends.sim.block_hashes import prompt_block_hashes

    prompts = [(1, 2, 3, 4, 5), (), (1, 2, 3, 4, 6, 7, 8), (1, 2, 9, 4), (2, 1, 3, 4), (3,)]
    a, empty, b, c, d, short = (h.tolist() for h in prompt_block_hashes(prompts, 2))
    assert len(a) == 2 and len(b) == 3 and not empty and not short
    assert a == b[:2]  # the same first four tokens
    assert c[0] == a[0] and c[1] != a[1]  # a change in block 1 changes block 1's hash on
    assert d[0] != a[0] and d[1] != a[1]  # a swap in block 0 changes every later hash
    assert len(set(a + b + c + d)) == 6


def test_a_block_no_other_request_can_hit_waits_for_its_hash_until_asked() -> None:
    """``skip`` leaves a filled block unregistered (PENDING) unless its hash is cached already
    (ANONYMOUS: first writer wins); ``register_pending`` registers it later, as if then."""
    from sweetspot.backends.sim.blocks import PENDING

    pool = BlockPool(8, caching=True)
    pool.allocate(4)
    assert list(pool.register([11])) == [0]
    blocks = [0, *pool.skip([11, 12, 13])]
    assert blocks == [0, ANONYMOUS, PENDING, PENDING] and pool.lookup([12], 1) == []
    pool.register_pending(blocks, [11, 11, 12, 13])
    assert blocks[:2] == [0, ANONYMOUS] and min(blocks[2:]) >= 0
    assert pool.lookup([11, 12, 13], 3) == [0, blocks[2], blocks[3]]
    pool.free(blocks, [11, 11, 12, 13], 0)
    assert pool.num_free == 8
