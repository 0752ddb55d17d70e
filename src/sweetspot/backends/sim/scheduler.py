"""A mirror of vLLM's V1 scheduler (``vllm/v1/core/sched/scheduler.py``), step by step.

The invariant, in vLLM's words: there is no prefill or decode phase; each request's computed
tokens catch up with its total tokens. One step (``schedule``) runs three phases:

1. *Running decodes*: every decoding request gets its token(s); one that needs a new KV block
   and finds none preempts the lowest-priority running request (``fcfs``: the last admitted;
   ``priority``: the largest (priority, arrival)) until it fits or is itself preempted.
   Preemption is by recompute: the victim frees its blocks and goes back to the waiting queue.
2. *Running prefills*: requests with prompt left get a chunk, capped by
   ``long_prefill_token_threshold`` and the remaining token budget, in running order.
3. *Waiting*: only when nothing was preempted this step, admit from the waiting queue
   (``fcfs`` order or lowest (priority, arrival) first) while the token budget, ``max_num_seqs``
   and the free blocks allow; prefix-cache hits (full blocks, never the whole prompt) are
   computed tokens that cost nothing.

Where this simplifies vLLM: decoding requests always come before prefilling ones in the
running order (vLLM appends admissions at the tail, so they nearly always do); a decode's
speculative tokens are never cut by the token budget; a waiting high-priority request does not
itself preempt (neither does vLLM's V1: preemption happens only when a running request cannot
grow); encoder, LoRA, KV-connector and structured-output paths are absent.

The ``v0`` mode reproduces the pre-V1 engine of the published 0.5/0.6 measurements: whole
prompts only, a step is either all prefills (admitted first) or all decodes, and
``num_scheduler_steps`` decode steps run per scheduling decision.

Decoding requests are not visited every step: their progress follows from a decode clock
(``decode_clock``), and only events (a new block needed, the last token) are bucketed by decode
step. A step costs O(events), which keeps 10,000 requests well under a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sweetspot.backends.sim.block_hashes import hash_chain
from sweetspot.backends.sim.cost import StepShape
from sweetspot.backends.sim.decode_clock import DecodeClock
from sweetspot.backends.sim.prefix_cache import PrefixCache
from sweetspot.backends.sim.request import DECODE, DONE, PREFILL, WAITING, SimRequest
from sweetspot.backends.sim.request_queue import RequestQueue, request_queue

__all__ = ["Scheduler", "SchedulerConfig", "StepPlan"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_blocks: int
    chunked_prefill: bool
    long_prefill_threshold: int  # 0 = no cap
    prefix_caching: bool
    priority: bool  # scheduling_policy == "priority"
    spec_tokens: int = 0  # k of speculative decoding, 0 = off
    v0: bool = False  # pre-V1 engine (published 0.5/0.6 cases)
    multi_step: int = 1  # V0 num_scheduler_steps
    # Admit a waiting request only when its whole sequence fits the free blocks, not just its
    # first chunk (vLLM's scheduler_reserve_full_isl, on by default from 0.19).
    reserve_full_isl: bool = False
    # Async scheduling: the next step is scheduled before this one's outputs are processed, so
    # a request that finishes holds its max_num_seqs slot and its KV blocks through one more
    # scheduling pass (vLLM's async scheduler; the scheduler skips its extra decode when
    # max_tokens is certain, so it costs no tokens).
    lagged_release: bool = False


@dataclass(slots=True)
class StepPlan:
    shape: StepShape
    prefills: list[tuple[SimRequest, int]]  # (request, tokens computed this step)
    decodes: bool  # decoding requests advance this step
    cpu_scheduled: bool  # the CPU scheduled this step (False inside a V0 multi-step run)


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, draw_emissions: Callable | None = None) -> None:
        self.cfg = cfg
        self.kv = PrefixCache(cfg.block_size, cfg.num_blocks, caching=cfg.prefix_caching)
        self.pool = self.kv.pool
        self.running: dict[SimRequest, None] = {}  # admission order
        self.prefilling: list[SimRequest] = []  # running requests with prompt left, in order
        self.waiting: RequestQueue = request_queue(cfg.priority)
        # draw_emissions: (remaining tokens) -> per-step tokens array (speculation), else None
        self.clock = DecodeClock(cfg.block_size, cfg.spec_tokens, draw_emissions)
        self._admitted = 0
        self._group_left = 0  # V0 multi-step: decode steps left in the current group
        self.preemptions = 0
        self._preempted = False  # any preemption yet (not reset with the counters)
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.finished: list[SimRequest] = []
        self._lagging: list[tuple[SimRequest, int]] = []  # finished, blocks not yet freed

    def reset_stats(self) -> None:
        """Forget counters and finished requests (after a warm-up); caches stay warm."""
        self.preemptions = self.prefix_queries = self.prefix_hits = 0
        self.pool.peak_used = self.pool.num_used
        self.finished = []

    @property
    def dnext(self) -> int:
        """Index the next decode step gets."""
        return self.clock.dnext

    # -- queues ---------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def add(self, req: SimRequest) -> None:
        self.waiting.add(req)

    # -- preemption -------------------------------------------------------------------------

    def _victim(self) -> SimRequest:
        if self.cfg.priority:
            return max(self.running, key=lambda r: (r.priority, r.arrival_s, r.admit_seq))
        return next(reversed(self.running))

    def _preempt(self, req: SimRequest, dstep: int) -> None:
        """Recompute-preemption: free everything, back to the front of the waiting queue."""
        del self.running[req]
        if req.state == DECODE:
            computed, generated = req.progress(dstep)
            steps = dstep - req.dec_start
            if steps > 0:
                req.pieces.append((req.dec_start, steps, req.dec_emit))
            req.generated = generated
            self.clock.stop(req)
        else:
            computed = req.computed
            self.prefilling.remove(req)
        self.kv.release(req, computed, keep_outputs=True)
        req.computed = 0
        req.state = WAITING
        req.epoch += 1
        req.preemptions += 1
        self.preemptions += 1
        self._preempted = True
        self.waiting.requeue(req)

    def _make_room(self, req: SimRequest, blocks: int, dstep: int) -> bool:
        """Preempt until ``blocks`` are free for ``req``; False when ``req`` itself went."""
        while self.pool.num_free < blocks:
            victim = self._victim()
            self._preempt(victim, dstep)
            if victim is req:
                return False
        return True

    # -- one step ---------------------------------------------------------------------------

    def schedule(self) -> StepPlan | None:
        """The next step's plan, or None when nothing can run. V1: decodes grow (phase 1),
        running prefills take chunks (phase 2), then waiting requests are admitted (phase 3);
        V0: a step of whole prefills or of decodes (``_plan_v0``)."""
        cfg = self.cfg
        if self._lagging and not self.running:  # an idle engine processed the outputs
            self._release_lagging()
        dstep = self.dnext
        budget = cfg.max_num_batched_tokens
        preempted_before = self.preemptions
        prefills: list[tuple[SimRequest, int]] = []
        if cfg.v0:
            decodes, cpu_scheduled = self._plan_v0(budget, dstep, prefills)
        else:
            decodes, cpu_scheduled = self.clock.num_decoding > 0, True

        num_decode_seqs = 0
        if decodes:
            self._grow_decodes(dstep)
            num_decode_seqs = self.clock.num_decoding
            budget -= num_decode_seqs * (1 + cfg.spec_tokens)

        if not cfg.v0:
            budget = self._continue_prefills(budget, dstep, prefills)
            if self.preemptions == preempted_before:
                budget -= self._admit(budget, dstep, prefills)
            if self.clock.num_decoding < num_decode_seqs:  # decodes preempted by prefills' blocks
                num_decode_seqs = self.clock.num_decoding

        if self._lagging:
            self._release_lagging()
        if not prefills and not num_decode_seqs:
            return None
        shape = self._shape(dstep, prefills, num_decode_seqs)
        return StepPlan(shape, prefills, num_decode_seqs > 0, cpu_scheduled)

    def _plan_v0(self, budget: int, dstep: int, prefills: list[tuple[SimRequest, int]]
                 ) -> tuple[bool, bool]:
        """V0: admit whole prompts when no multi-step run is under way; a step with prefills runs
        no decodes. Returns (decodes run this step, the CPU scheduled this step)."""
        decodes = self.clock.num_decoding > 0
        if not decodes:
            self._group_left = 0  # a multi-step run ends when its batch has finished
        if self._group_left == 0 and self.waiting:
            self._admit(budget, dstep, prefills)
            if prefills:  # V0: a step of prefills runs no decodes
                decodes = False
        cpu_scheduled = self._group_left == 0
        if decodes and not prefills:
            self._group_left = (self._group_left or self.cfg.multi_step) - 1
        return decodes, cpu_scheduled

    def _continue_prefills(self, budget: int, dstep: int,
                           prefills: list[tuple[SimRequest, int]]) -> int:
        """Phase 2: running requests with prompt left get a chunk each, in running order, while
        the budget lasts; returns the budget left."""
        cfg = self.cfg
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req not in self.running:  # preempted by an earlier request of this loop
                continue
            n = req.num_tokens - req.computed
            if 0 < cfg.long_prefill_threshold < n:
                n = cfg.long_prefill_threshold
            n = min(n, budget)
            need = -(-(req.computed + n) // cfg.block_size) - req.num_blocks
            if need > 0:
                if not self._make_room(req, need, dstep):
                    continue
                self.pool.allocate(need)
                req.n_anonymous += need
            prefills.append((req, n))
            budget -= n
        return budget

    def _shape(self, dstep: int, prefills: list[tuple[SimRequest, int]],
               num_decode_seqs: int) -> StepShape:
        """What the step computes, for the cost model."""
        pf_tokens = pf_context = completing = 0
        pf_pairs = 0.0
        for req, n in prefills:
            pf_tokens += n
            pf_context += req.computed + n
            pf_pairs += n * (req.computed + (n + 1) / 2)
            if req.computed + n == req.prompt_len + req.generated:  # its prompt is done
                completing += 1
        k = self.cfg.spec_tokens
        return StepShape(
            num_seqs=num_decode_seqs + len(prefills),
            num_decode_tokens=num_decode_seqs * (1 + k),
            num_prefill_tokens=pf_tokens,
            num_sampled=num_decode_seqs * (1 + k) + completing,
            decode_context=self.clock.context(dstep) if num_decode_seqs else 0,
            prefill_context=pf_context,
            prefill_pairs=pf_pairs,
            draft_tokens=num_decode_seqs * k,
            draft_context=self.clock.context(dstep) * k if num_decode_seqs else 0,
            draft_passes=k if num_decode_seqs else 0,
        )

    def _grow_decodes(self, dstep: int) -> None:
        """Phase 1: the decoding requests whose next token opens a KV block get one, in running
        order, preempting when the pool is empty. Without speculation a request's next block
        is due ``block_size`` decode steps later."""
        entries = self.clock.need.pop(dstep, None)
        if entries and self._preempted:  # only a preemption leaves stale entries behind
            entries = [e for e in entries if e[0].epoch == e[1] and e[0].state == DECODE]
        if not entries:
            return
        due = dstep + self.cfg.block_size
        later = self.clock.need.setdefault(due, [])
        # One block each without speculation (``DecodeClock.start``).
        total = len(entries) if self.clock.draw_emissions is None else sum(
            [e[2] for e in entries])
        if total <= self.pool.num_free:  # the common case: no preemption, one allocation
            self.pool.allocate(total)
            if self.clock.draw_emissions is None:  # each is (req, epoch, 1): due again later
                for entry in entries:
                    req = entry[0]
                    req.n_anonymous += 1
                    if due < req.dec_end:
                        later.append(entry)
                return
            for entry in entries:
                entry[0].n_anonymous += entry[2]
            return
        entries.sort(key=lambda e: e[0].admit_seq)
        granted = []
        for entry in entries:
            req, _, n = entry
            if req.state != DECODE or req.epoch != entry[1]:
                continue  # preempted for an earlier request of this step
            if not self._make_room(req, n, dstep):
                continue
            self.pool.allocate(n)
            req.n_anonymous += n
            granted.append(entry)
        for req, epoch, _ in granted:
            if req.dec_emit is None and req.epoch == epoch and req.state == DECODE \
                    and due < req.dec_end:
                later.append((req, epoch, 1))

    def _admit(self, budget: int, dstep: int, prefills: list[tuple[SimRequest, int]]) -> int:
        """Phase 3: admit waiting requests; returns the tokens they took from the budget."""
        cfg, pool, bs = self.cfg, self.pool, self.cfg.block_size
        used = 0
        while budget - used > 0 and len(self.running) + len(self._lagging) < cfg.max_num_seqs:
            req = self.waiting.peek()
            if req is None:
                break
            hits: list[int] = []
            if cfg.prefix_caching and req.computed == 0:
                # Never the whole prompt: the last token is recomputed to get logits.
                max_blocks = (req.num_tokens - 1) // bs
                if self.kv.may_hit(req):
                    hits = pool.lookup(hash_chain(req, bs, max_blocks), max_blocks)
                self.prefix_queries += req.num_tokens
                self.prefix_hits += len(hits) * bs
            computed = len(hits) * bs if hits else req.computed
            n = req.num_tokens - computed
            if not cfg.chunked_prefill and n > budget - used:
                break
            if 0 < cfg.long_prefill_threshold < n:
                n = cfg.long_prefill_threshold
            n = min(n, budget - used)
            need = -(-(computed + n) // bs) - len(hits)
            free = pool.num_free - pool.evictable_among(hits) if hits else pool.num_free
            if need > free or (cfg.reserve_full_isl
                               and -(-req.num_tokens // bs) - len(hits) > free):
                break
            self.waiting.pop()
            if hits:
                pool.touch(hits)
            pool.allocate(need)
            req.blocks, req.n_anonymous = hits, need
            req.computed = computed
            req.state = PREFILL
            self._admitted += 1
            req.admit_seq = self._admitted
            self.running[req] = None
            self.prefilling.append(req)
            prefills.append((req, n))
            used += n
        return used

    def complete(self, plan: StepPlan, end_s: float) -> list[SimRequest]:
        """Apply a finished step: advance prefills, finish requests; returns the finished."""
        done: list[SimRequest] = []
        dstep = self.dnext
        if plan.decodes:
            self.clock.dnext += 1
            for req, epoch in self.clock.finish.pop(dstep, ()):
                if req.epoch != epoch or req.state != DECODE:
                    continue
                steps = dstep - req.dec_start + 1
                req.pieces.append((req.dec_start, steps, req.dec_emit))
                computed, req.generated = req.progress(dstep + 1)
                self.clock.stop(req)
                done.append(req)
                self._retire(req, computed)
        for req, n in plan.prefills:
            if req.state != PREFILL:
                continue
            req.computed += n
            self.kv.register(req, min(req.computed, req.prompt_len))
            if req.computed < req.prompt_len + req.generated:  # num_tokens, inlined
                continue
            self.prefilling.remove(req)
            req.generated += 1
            req.pieces.append(end_s)
            if req.generated >= req.output_len:
                done.append(req)
                self._retire(req, req.computed)
            else:
                self.clock.start(req, req.computed)
        return done

    def _retire(self, req: SimRequest, computed: int) -> None:
        del self.running[req]
        req.state = DONE
        self.finished.append(req)
        if self.cfg.lagged_release:
            self._lagging.append((req, computed))
            return
        self.kv.release(req, computed, keep_outputs=False)
        req.hashes = req.prompt_hashes = None  # the cache map holds what is still needed

    def _release_lagging(self) -> None:
        """Free the slots and blocks of requests whose outputs were processed (async)."""
        for req, computed in self._lagging:
            self.kv.release(req, computed, keep_outputs=False)
            req.hashes = req.prompt_hashes = None
        self._lagging.clear()
