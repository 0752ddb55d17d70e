"""Steady-state capacity: what a configuration serves once its batch is full, from the records of
one saturating run — every request sent at once, or (what studies run) a closed loop keeping
more requests in flight than the batch holds, so that some always wait.

A saturating run's plain throughput (all tokens / the run's duration) is an artefact of its
length: it starts with a ramp (the first batch's prefills, then every request of that batch
decoding in lockstep with no new prefill to interleave) and ends with a drain (the last few,
often long, requests alone on the server). Neither is the server's capacity, and both weigh
more the shorter the run. The capacity is the output rate inside the window where the server is
saturated:

- it opens once half a batch has finished (the first wave's lockstep has broken up and new
  prefills mix with decodes, as they do at any steady rate), the batch being the most requests
  seen running at once (first token received, last not yet);
- it closes at the last first token: up to then some request was still waiting, so the batch
  was full or the KV cache was; after it the queue is empty and the batch only drains;
- or, in a closed loop, at its last send if that comes first: the requests still in flight
  then are served with no new ones arriving, and a server whose API front end is the limit
  runs faster without that intake (on an H100, 2026-12-06, a 1,024-sequence loop's last 12 s
  ran 9,500-11,700 tok/s against 6,200 before). A burst's sends all precede the window.

- its opening then moves past any initial transient, by the Marginal Standard Error Rule
  (MSER-5, White 1997: the truncation that minimises the standard error of the rest's mean,
  over the window's output rate in 20 batches of 5 bins, at most half of it cut). On a real
  server whose API front end admits requests more slowly than its engine finishes them, a
  closed loop starts with a backlog the engine works off faster than any steady state can
  sustain: on an H200 (2026-12-06) the first 40 s of a 1,024-sequence server ran 8,300 tok/s
  with a queue, then 6,800 with the engine half empty and the front end the limit.

The run saturated the server when the window holds at least one whole batch of completions;
otherwise (too few requests for the configuration's batch) the figure is the whole run's rate and
is flagged, since it understates the capacity. The same function reads simulated and measured
records, so a prediction and a measurement are windowed alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sweetspot.backends.records import RequestRecord

__all__ = ["SteadyState", "steady_state"]


@dataclass(frozen=True, slots=True)
class SteadyState:
    output_throughput: float  # output tokens/s inside the window
    request_throughput: float  # the same in requests/s of the run's mean output length
    window_s: tuple[float, float]  # (open, close) on the run's clock
    saturated: bool  # the window holds at least one whole batch of completions
    peak_running: int  # most requests running at once (first token in, last not yet)
    completions: int  # requests that finished inside the window


def _peak_running(first_s: np.ndarray, end_s: np.ndarray) -> int:
    times = np.concatenate([end_s, first_s])
    steps = np.concatenate([-np.ones(len(end_s)), np.ones(len(first_s))])
    order = np.lexsort((steps, times))  # at equal times the finish counts first
    return int(np.max(np.cumsum(steps[order]), initial=0))


def steady_state(records: Sequence[RequestRecord], duration_s: float) -> SteadyState:
    """The steady-state capacity of the saturating run ``records`` (see the module's text)."""
    ok = [r for r in records if r.ok and r.chunk_times_s]
    if not ok:
        return SteadyState(0.0, 0.0, (0.0, duration_s), False, 0, 0)
    first = np.array([r.chunk_times_s[0] for r in ok])
    end = np.array([r.end_s for r in ok])
    outputs = np.array([r.output_tokens for r in ok], dtype=float)
    mean_output = float(outputs.mean()) or 1.0
    peak = _peak_running(first, end)
    ends = np.sort(end)
    opens = float(ends[max(1, math.ceil(peak / 2)) - 1])
    closes = float(first.max())
    last_send = max(r.sent_s for r in records)
    if opens < last_send < closes:
        closes = last_send
    completions = int(np.count_nonzero((end > opens) & (end <= closes)))
    saturated = bool(closes > opens and completions >= peak)
    if not saturated:
        tokens = float(outputs.sum())
        span = duration_s if duration_s > 0 else float(end.max())
        rate = tokens / span if span > 0 else 0.0
        return SteadyState(rate, rate / mean_output, (0.0, span), False, peak, len(ok))
    # Every token's arrival; a chunk carries output / chunks tokens (more than one with
    # speculative decoding).
    times = np.concatenate([np.asarray(r.chunk_times_s, dtype=float) for r in ok])
    weights = np.concatenate([np.full(len(r.chunk_times_s), n / len(r.chunk_times_s))
                              for r, n in zip(ok, outputs, strict=True)])
    closes = _at_token(times, opens, closes)
    opens = _past_transient(times, weights, opens, closes)
    inside = (times > opens) & (times <= closes)
    rate = float(weights[inside].sum()) / (closes - opens)
    return SteadyState(rate, rate / mean_output, (opens, closes), True, peak, completions)


def _at_token(times: np.ndarray, opens: float, closes: float) -> float:
    """The last token's arrival at or before ``closes`` (after ``opens``), as the window's
    other ends are token times: a window from token to token holds whole gaps between tokens,
    so a steady server reads exactly."""
    ordered = np.sort(times)
    at = int(np.searchsorted(ordered, closes, side="right")) - 1
    return float(ordered[at]) if at >= 0 and ordered[at] > opens else closes


MSER_BATCHES = 20  # batch means the window's rate is read in (MSER-5: 5 bins each)


def _past_transient(times: np.ndarray, weights: np.ndarray, opens: float, closes: float
                    ) -> float:
    """Where the window's steady part starts: MSER-5 over the output rate of [opens, closes]
    (the truncation ``d`` minimising var(rest) / len(rest), ``d`` at most half the batches)."""
    edges = np.linspace(opens, closes, 5 * MSER_BATCHES + 1)
    per_bin, _ = np.histogram(times, bins=edges, weights=weights)
    means = per_bin.reshape(MSER_BATCHES, 5).mean(axis=1)
    scores = [float(np.var(means[d:])) / (MSER_BATCHES - d)
              for d in range(MSER_BATCHES // 2 + 1)]
    cut = int(np.argmin(scores))
    if cut == 0:
        return opens
    # At the last token before the cut, as the window's other ends are token times: a window
    # from token to token holds whole gaps between tokens, so a steady server reads exactly.
    ordered = np.sort(times)
    before = int(np.searchsorted(ordered, edges[5 * cut], side="right")) - 1
    return max(opens, float(ordered[before])) if before >= 0 else opens
