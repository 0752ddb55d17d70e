"""The per-request record every backend emits: what happened to one request, in seconds on
one monotonic clock whose zero is the run's start (just before the first send).

The simulator and the real load generator both fill it, so a prediction and a measurement can be
compared request by request; ``sweetspot.metrics`` turns a list of them into the result that
``vllm bench serve`` would print.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RequestRecord"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: int
    scheduled_s: float  # when the workload meant it to be sent
    sent_s: float  # when the POST actually went out (timer start, as vLLM's client)
    # Arrival of each streamed message carrying choices: a tuple, or from the simulator a
    # ``StepTimes`` (reads, compares and hashes as that tuple).
    chunk_times_s: Sequence[float]
    end_s: float | None  # end of the response (last message with choices); None if failed
    prompt_tokens: int
    output_tokens: int  # usage.completion_tokens (falls back to the chunk count)
    priority: int = 0
    prefix_group: int | None = None  # shared-prefix group, None when the prompt has none
    error: str | None = None  # why it failed (HTTP status, disconnect, timeout); None if ok
    slot_wait_s: float = 0.0  # time spent waiting for a concurrency slot (max_concurrency)

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None

    @property
    def client_lag_s(self) -> float:
        """How late the client itself sent it: actual minus scheduled send time, less any wait
        for a concurrency slot (that wait is the benchmark's design, not the client's cost)."""
        return self.sent_s - self.scheduled_s - self.slot_wait_s

    @property
    def ttft_s(self) -> float | None:
        """Send to first message with non-empty choices."""
        return self.chunk_times_s[0] - self.sent_s if self.chunk_times_s else None

    @property
    def e2el_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.sent_s

    @property
    def itls_s(self) -> tuple[float, ...]:
        """Gaps between consecutive messages carrying choices (per chunk, not per token)."""
        t = self.chunk_times_s
        return tuple(b - a for a, b in itertools.pairwise(t))

    @property
    def tpot_s(self) -> float | None:
        """(E2EL - TTFT) / (output tokens - 1); None for one-token outputs and failures."""
        if not self.ok or self.output_tokens <= 1 or self.ttft_s is None:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)
