"""The decode clock: how the scheduler advances decoding requests without visiting them.

A request that finishes its prefill decodes from decode step ``dnext`` on; from then its progress
follows from the clock (``SimRequest.progress``), so a step touches only the requests with an
event due at it: a new KV block needed (``need``) or the last token (``finish``), both bucketed by
decode step. Entries carry the request's epoch: those of a request preempted since are stale and
are skipped where they are popped. The decode context summed over decoding requests is a line in
the decode step (``_ctx_base + d * _ctx_rate``), so reading it is O(1) too.
"""

from __future__ import annotations

from collections.abc import Callable

from sweetspot.backends.sim.request import DECODE, SimRequest

__all__ = ["DecodeClock"]


class DecodeClock:
    def __init__(self, block_size: int, spec_tokens: int,
                 draw_emissions: Callable | None = None) -> None:
        self.block_size = block_size
        self.spec_tokens = spec_tokens  # k of speculative decoding, 0 = off
        self.draw_emissions = draw_emissions  # (remaining tokens) -> per-step tokens array
        self.dnext = 0  # index the next decode step gets
        self.num_decoding = 0
        self.need: dict[int, list[tuple[SimRequest, int, int]]] = {}  # dstep -> (req, epoch, n)
        self.finish: dict[int, list[tuple[SimRequest, int]]] = {}  # dstep -> (req, epoch)
        self._ctx_base = 0.0  # decode context at step d = _ctx_base + d * _ctx_rate
        self._ctx_rate = 0.0

    def start(self, req: SimRequest, computed: int) -> None:
        """``req`` just produced a token from its prefill; it decodes from the next decode step."""
        remaining = req.output_len - req.generated
        start = self.dnext
        req.state, req.dec_start = DECODE, start
        req.dec_computed, req.dec_generated = computed, req.generated
        req.dec_end = start + remaining
        bs, k = self.block_size, self.spec_tokens
        if self.draw_emissions is None:
            req.dec_emit = req.dec_cum = None
            req.dec_rate = 1.0
            steps = remaining
            first = (-computed) % bs  # the first decode step whose token opens a block
            if first < steps:
                self.need.setdefault(start + first, []).append((req, req.epoch, 1))
        else:
            emit = self.draw_emissions(remaining)
            cum = emit.cumsum()
            req.dec_emit, req.dec_cum = emit, cum
            steps = len(emit)
            req.dec_rate = remaining / steps
            # Step j verifies 1 + k tokens after the cum[j-1] accepted before it.
            needed = -(-(computed + (cum - emit) + 1 + k) // bs)
            held = req.num_blocks
            for j in range(steps):
                n = int(needed[j]) - held
                if n > 0:
                    self.need.setdefault(start + j, []).append((req, req.epoch, n))
                    held = int(needed[j])
        self.finish.setdefault(start + steps - 1, []).append((req, req.epoch))
        self.num_decoding += 1
        self._ctx_base += computed - start * req.dec_rate
        self._ctx_rate += req.dec_rate

    def stop(self, req: SimRequest) -> None:
        """``req`` leaves decoding (finished or preempted)."""
        self.num_decoding -= 1
        self._ctx_base -= req.dec_computed - req.dec_start * req.dec_rate
        self._ctx_rate -= req.dec_rate

    def context(self, dstep: int) -> int:
        """KV tokens the decoding requests attend to at decode step ``dstep``."""
        return int(self._ctx_base + dstep * self._ctx_rate)
