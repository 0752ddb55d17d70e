"""The scheduler's side of the prefix cache: which of a request's full blocks go into the cache
map, and when (``vllm/v1/core/kv_cache_manager.py`` caches blocks as they fill).

What must hold: at every lookup the cache map holds exactly the hashes vLLM's would, so every
hit, miss and eviction is vLLM's. A block can be found only by a request whose prompt carries
its hash. So a hash that only one request carries can be found only by that request, and that
request looks its blocks up only when it is admitted again after a preemption. With every
prompt of the run known before the first arrives (``expect``), such a block is left without
its hash (``PENDING``) while the request runs, gets it when the request is preempted (just as
if it had had it all along: no one else could have registered that hash or looked it up
meanwhile) and never gets it if the request finishes (no one could ever find it). In a run of
distinct prompts that is nearly every block: their hashes never enter the map, or leave it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sweetspot.backends.sim.block_hashes import (
    Expected,
    expect_prompts,
    hash_chain,
    index_prompts,
)
from sweetspot.backends.sim.blocks import PENDING, BlockPool
from sweetspot.backends.sim.request import SimRequest

__all__ = ["PrefixCache"]


class PrefixCache:
    def __init__(self, block_size: int, num_blocks: int, *, caching: bool) -> None:
        self.block_size = block_size
        self.caching = caching
        self.pool = BlockPool(num_blocks, caching=caching)
        # From ``expect``: every expected prompt's block hashes (by prompt object), and the
        # hashes more than one prompt carries (None: not known, so every block is registered).
        self._known: Expected | None = None
        self._shared: set[int] | None = None

    def expect(self, prompts: Sequence[Sequence[int]]) -> None:
        """Every prompt this scheduler will see, before the first arrives (a copy for each time
        one is sent): hashed at once, and the hashes more than one of them carries noted."""
        if self.caching and prompts:
            self._known = expect_prompts(prompts, self.block_size)
            self._shared = self._known.shared

    def index(self, reqs: Iterable[SimRequest]) -> None:
        """Hash the full prompt blocks of requests about to arrive, all at once."""
        if not self.caching:
            return
        reqs = list(reqs)
        known = self._known
        if known is not None and any(r.prompt_ids not in known for r in reqs):
            # Its blocks may match ones already left without their hashes: the premise is gone.
            raise RuntimeError("a prompt arrived that the scheduler was not told to expect")
        index_prompts(reqs, self.block_size, known)

    def register(self, req: SimRequest, computed: int, *, all_of_them: bool = False) -> None:
        """Give the request's full blocks up to ``computed`` tokens their hashes, those only
        it carries left ``PENDING`` (see the module text) unless ``all_of_them``."""
        if not self.caching:
            return
        first = len(req.blocks)
        full = min(computed // self.block_size, first + req.n_anonymous)
        if all_of_them and PENDING in req.blocks:
            self.pool.register_pending(req.blocks, hash_chain(req, self.block_size, first))
        if full <= first:
            return
        shared = self._shared
        if not all_of_them and shared is not None and first >= req.n_shared \
                and not req.preemptions:
            # Hashes of its own only, none of them cached: it never registered any.
            req.blocks.extend([PENDING] * (full - first))
            req.n_anonymous -= full - first
            return
        hashes = hash_chain(req, self.block_size, full)[first:full]
        if all_of_them or shared is None:
            req.blocks.extend(self.pool.register(hashes))
        else:
            common = 0  # shared hashes come first: a shared block's prefix is shared too
            while common < len(hashes) and hashes[common] in shared:
                common += 1
            if common:
                req.blocks.extend(self.pool.register(hashes[:common]))
            req.blocks.extend(self.pool.skip(hashes[common:]))
        req.n_anonymous -= full - first

    def may_hit(self, req: SimRequest) -> bool:
        """Whether a lookup of the request's blocks can find anything: not when its first
        block's hash is its own and it was never preempted (nothing holds that hash)."""
        return self._shared is None or req.n_shared > 0 or req.preemptions > 0

    def release(self, req: SimRequest, computed: int, *, keep_outputs: bool) -> None:
        """Release the request's blocks. A preempted request's blocks, outputs included, stay
        findable for its own resumption; a finished one's outputs can never be hit again, so
        they go unhashed."""
        if keep_outputs:
            self.register(req, computed, all_of_them=True)
        else:
            self.register(req, min(computed, req.prompt_len))
        self.pool.free(req.blocks, req.hashes, req.n_anonymous)
        req.blocks, req.n_anonymous = [], 0
