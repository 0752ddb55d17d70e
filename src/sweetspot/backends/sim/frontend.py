"""The API server in front of the simulated engine: one process with one event loop.

Invariant: the API server does one thing at a time, in the order work became ready. A request
is ready for it once it has crossed the network (half the round-trip latency after it was
sent); taking it in (HTTP parsing, request validation, for the chat endpoint rendering the chat
template and tokenising the text) keeps the server busy for ``intake_s``, and the engine sees
the request when that is done. An output the engine produced at ``t`` is streamed to the client
only after every intake that was ready before ``t``: it waits behind them in the event loop. So
a burst of requests delays every first token until the burst has been taken in, as a real
server does (gpustack's vLLM 0.11 runs of 1,000 chat requests at once on an H100: mean TTFT
18-22 s whatever the request, 22.7 s for the whole 128-token run).

Offline (``LLM.generate``, ``vllm bench throughput``) there is no API server at all.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

__all__ = ["CHAT_INTAKE_S", "ENDPOINTS", "ApiServer"]

ENDPOINTS = ("completions", "chat")
# What a chat request adds to the intake: rendering the model's chat template and tokenising
# the text (a completions request of token ids needs neither). Fitted to public-cases.md P7's
# 128-in / 4-out run: 1,000 chat requests at once took 22.7 s on vLLM 0.11, 44 req/s, while
# the engine needed under 10 s for them.
CHAT_INTAKE_S = 20.5e-3


class ApiServer:
    """The serial front end of one simulated run (see the module text)."""

    def __init__(self, *, intake_s: float, half_latency_s: float) -> None:
        self.intake_s = intake_s
        self.half_latency_s = half_latency_s
        self._free_s = 0.0  # when the server can take the next request
        self._ready: list[float] = []  # when each intake became ready, in the order taken
        self._done: list[float] = []  # when each intake was done (non-decreasing)

    def take(self, sent_s: float) -> float:
        """Take a request sent at ``sent_s``; returns when the engine has it."""
        ready = sent_s + self.half_latency_s
        start = max(ready, self._free_s)
        self._free_s = start + self.intake_s
        if self.intake_s > 0:
            self._ready.append(ready)
            self._done.append(self._free_s)
        return self._free_s

    def streamed(self, t: float) -> float:
        """When an output the engine produced at ``t`` reaches the client."""
        i = bisect_right(self._ready, t)
        out = max(t, self._done[i - 1]) if i else t
        return out + self.half_latency_s

    def streamed_all(self, times: np.ndarray) -> np.ndarray:
        """``streamed`` of every engine time in ``times`` at once."""
        times = np.asarray(times, dtype=float)
        if not self._ready:
            return times + self.half_latency_s
        i = np.searchsorted(np.asarray(self._ready), times, side="right")
        done = np.concatenate(([0.0], np.asarray(self._done)))[i]
        return np.maximum(times, done) + self.half_latency_s
