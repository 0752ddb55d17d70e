"""The API server in front of the simulated engine: one process with one event loop.

Invariant: the API server does one thing at a time. A request is ready for it once it has
crossed the network (half the round-trip latency after it was sent). Its event loop runs the
handlers of the requests ready together round-robin: each handler's first part (HTTP parsing,
request validation, the engine request's setup: ``intake_s``) runs for every one of them before
any goes on. An idle server turns to the first request as it comes; the rest of a burst, ready
by the time that one is taken in, reaches the engine together once the API server has taken
all of it in (requests that become ready meanwhile form the next round). A chat request then
renders its chat template and tokenises the text (``render_s``), one request at a time: the
engine sees each as its rendering ends. An output the engine produced at ``t`` is streamed to
the client only after every intake that was ready before ``t``: it waits behind them.

Seen on vLLM 0.24 (H100, ``benchmarks/gpu/results-2026-12-07-*``): every burst of 150-600
requests got no first token (but the first request's) until 0.5-1.0 s after it was sent, then
a step's worth of first tokens every step (600 of 128 tokens on the 8B shape: 80 by 0.8 s,
144 by 1.0 s, ... 600 by 2.3 s; simulated so: 65, 128, ... 600 by 2.4 s): the engine had
nothing to run until the API server had taken the burst in, about 1 ms a request. A chat
burst on vLLM 0.11 (gpustack, 1,000 chat requests at once on an H100, 22.7 s for the whole
128-token run) is the rendering: its requests reach the engine one by one.

The pre-V1 engine's cases (vLLM 0.5-0.7, public-cases.md P1-P5) were fitted with each request
taken in alone (``rounds=False``): their bursts are not measured here, so they keep that.

Offline (``LLM.generate``, ``vllm bench throughput``) there is no API server at all.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

__all__ = ["CHAT_INTAKE_S", "ENDPOINTS", "ApiServer"]

ENDPOINTS = ("completions", "chat")
# What a chat request adds after its intake, one request at a time (``render_s``): rendering
# the model's chat template and tokenising the text (a completions request of token ids needs
# neither). Fitted to public-cases.md P7's
# 128-in / 4-out run: 1,000 chat requests at once took 22.7 s on vLLM 0.11, 44 req/s, while
# the engine needed under 10 s for them.
CHAT_INTAKE_S = 20.5e-3


class ApiServer:
    """The serial front end of one simulated run (see the module text)."""

    def __init__(self, *, intake_s: float, half_latency_s: float, render_s: float = 0.0,
                 rounds: bool = True) -> None:
        self.intake_s = intake_s
        self.render_s = render_s
        self.rounds = rounds  # False: each request taken in alone (the pre-V1 engine's fit)
        self.half_latency_s = half_latency_s
        self._free_s = 0.0  # when the server can take the next request
        self._ready: list[float] = []  # when each intake became ready, in the order taken
        self._done: list[float] = []  # when each intake was done (non-decreasing)

    def take_all(self, sent_s: Sequence[float]) -> list[float]:
        """Take requests sent at ``sent_s`` (non-decreasing, after any taken before); returns
        when the engine has each: those ready when the server turns to them, as one round."""
        ready = [s + self.half_latency_s for s in sent_s]
        arrivals: list[float] = []
        i = 0
        while i < len(ready):
            start = max(ready[i], self._free_s)
            # An idle server turns to the first request that comes alone; a busy one takes
            # every request ready by the time it is free as one round.
            busy = self._free_s > ready[i]
            j = bisect_right(ready, start, lo=i) if self.rounds and busy else i + 1
            done = start + (j - i) * self.intake_s
            for _ in range(i, j):
                done += self.render_s
                arrivals.append(done)
            self._free_s = done
            i = j
        if self.intake_s > 0 or self.render_s > 0:
            self._ready.extend(ready)
            self._done.extend(arrivals)
        return arrivals

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
