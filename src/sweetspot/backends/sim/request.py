"""One request inside the simulated engine, and the token timeline it leaves behind."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DECODE", "DONE", "PREFILL", "WAITING", "SimRequest"]

WAITING, PREFILL, DECODE, DONE = range(4)


@dataclass(slots=True, eq=False)
class SimRequest:
    """Mutable engine state of one request (identity equality: the scheduler keys on it).

    A decoding request is not touched every step: its progress is implied by the decode clock
    (``dec_start`` and the counts at that point), so a step costs O(1) per event, not per request.
    """

    rid: int
    prompt_len: int
    output_len: int
    priority: int
    scheduled_s: float  # when the workload meant to send it
    prompt_ids: tuple[int, ...]
    prefix_group: int | None = None
    sent_s: float = 0.0
    slot_wait_s: float = 0.0
    arrival_s: float = 0.0  # reaches the engine (sent + front-end latency)
    computed: int = 0  # num_computed_tokens while waiting / prefilling
    generated: int = 0  # output tokens produced so far (valid while not decoding)
    # KV blocks held: the leading ones processed for the prefix cache (a hashed block's id, or
    # ANONYMOUS where another block held the hash), then ``n_anonymous`` not yet hashed.
    blocks: list[int] = field(default_factory=list)
    n_anonymous: int = 0
    prompt_hashes: np.ndarray | None = None  # its prompt's full-block hashes (block_hashes)
    n_shared: int = 0  # leading prompt blocks whose hash another request carries too
    hashes: list[int] | None = None  # full-block hash chain (prompt, then its own outputs)
    state: int = WAITING
    epoch: int = 0  # bumped on preemption: stale bucket entries are skipped
    admit_seq: int = 0  # position in the running order
    # Decode progress: the decode step at which decoding (re)started, counts at that point.
    dec_start: int = 0
    dec_computed: int = 0
    dec_generated: int = 0
    dec_end: int = 0  # the decode step after its last: dec_start + tokens left at the start
    dec_emit: np.ndarray | None = None  # tokens per decode step (speculation); None = 1 each
    dec_cum: np.ndarray | None = None  # cumulative dec_emit
    dec_rate: float = 1.0  # expected tokens per decode step (context bookkeeping)
    # Timeline: floats are single tokens at a known time (prefill completion); tuples are
    # (first decode step, steps, tokens-per-step array or None) runs.
    pieces: list = field(default_factory=list)
    preemptions: int = 0
    error: str | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks) + self.n_anonymous

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what a (re)started prefill must compute."""
        return self.prompt_len + self.generated

    def progress(self, dstep: int) -> tuple[int, int]:
        """(computed, generated) of a decoding request before decode step ``dstep`` runs."""
        j = dstep - self.dec_start
        if self.dec_cum is None:
            return self.dec_computed + j, self.dec_generated + j
        done = int(self.dec_cum[j - 1]) if j > 0 else 0
        return self.dec_computed + done, self.dec_generated + done
