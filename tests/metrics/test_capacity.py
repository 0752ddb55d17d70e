"""Steady-state capacity: the saturated window of a burst, not its ramp or its drain."""

from __future__ import annotations

import numpy as np
import pytest

from sweetspot.backends.records import RequestRecord
from sweetspot.metrics.capacity import steady_state


def _server(n: int, batch: int, outputs: np.ndarray, step_s: float = 0.01
            ) -> list[RequestRecord]:
    """A server running ``batch`` requests at a time, one token each per step, taking the next
    queued request as soon as one finishes; every request sent at 0."""
    running: list[list] = []  # [request, tokens left, chunk times]
    queue = list(range(n))
    done: list[RequestRecord] = []
    t = 0.0
    while queue or running:
        while queue and len(running) < batch:
            i = queue.pop(0)
            running.append([i, int(outputs[i]), []])
        t += step_s
        for item in running:
            item[1] -= 1
            item[2].append(t)
        for item in [x for x in running if x[1] == 0]:
            running.remove(item)
            i, _, times = item
            done.append(RequestRecord(i, 0.0, 0.0, tuple(times), times[-1], 10,
                                      int(outputs[i])))
    return sorted(done, key=lambda r: r.request_id)


def test_the_window_holds_the_full_batch_rate_and_ignores_the_drain() -> None:
    """A batch of 8 at one token per 10 ms serves 800 tok/s while it is full; the drain (the
    long last requests alone) pulls the whole run's rate far below that."""
    rng = np.random.default_rng(0)
    outputs = rng.integers(20, 60, 200)
    outputs[-3:] = 400  # three long requests at the end: a long drain
    records = _server(200, 8, outputs)
    duration = max(r.end_s for r in records)
    whole = outputs.sum() / duration
    steady = steady_state(records, duration)
    assert steady.saturated and steady.peak_running == 8
    assert steady.output_throughput == pytest.approx(800, rel=0.02)
    assert whole < 0.85 * steady.output_throughput
    assert steady.request_throughput == pytest.approx(800 / outputs.mean(), rel=0.02)


def test_the_figure_does_not_move_with_the_run_length() -> None:
    rng = np.random.default_rng(1)
    short = steady_state(r := _server(100, 8, rng.integers(10, 90, 100)), max(x.end_s for x in r))
    long = steady_state(r := _server(200, 8, rng.integers(10, 90, 200)), max(x.end_s for x in r))
    assert short.saturated and long.saturated
    assert long.output_throughput == pytest.approx(short.output_throughput, rel=0.05)


def test_a_run_that_never_fills_the_batch_is_flagged() -> None:
    """Fewer requests than the batch holds: no queue ever formed, so no steady state."""
    outputs = np.full(6, 50)
    records = _server(6, 8, outputs)
    steady = steady_state(records, max(r.end_s for r in records))
    assert not steady.saturated
    assert steady.output_throughput == pytest.approx(600, rel=0.01)  # the whole run's rate


def test_no_successful_request() -> None:
    failed = RequestRecord(0, 0.0, 0.0, (), None, 10, 0, error="HTTP 500")
    steady = steady_state([failed], 1.0)
    assert steady.output_throughput == 0 and not steady.saturated


def test_an_initial_backlog_faster_than_the_steady_state_is_cut_off() -> None:
    """A server that runs its first 40 s a fifth faster (the engine working off a backlog its
    front end cannot refill) then settles: the capacity is the settled rate, not the blend."""
    rng = np.random.default_rng(2)
    outputs = rng.integers(20, 60, 3000)
    records = _server(3000, 8, outputs)  # 800 tok/s throughout
    fast_until = 40.0

    def warp(t: float) -> float:  # the first 40 s at 1.25x speed
        return t / 1.25 if t <= fast_until else fast_until / 1.25 + (t - fast_until)

    warped = [RequestRecord(r.request_id, 0.0, 0.0, tuple(warp(t) for t in r.chunk_times_s),
                            warp(r.end_s), 10, r.output_tokens) for r in records]
    duration = max(r.end_s for r in warped)
    steady = steady_state(warped, duration)
    assert steady.saturated
    assert steady.window_s[0] >= 0.8 * fast_until / 1.25
    assert steady.output_throughput == pytest.approx(800, rel=0.02)


def test_a_closed_loop_ends_at_its_last_send() -> None:
    """A closed loop keeping 128 requests in flight on a batch of 8: after its last send the
    server serves what is left with no new requests arriving, and a server whose front end is
    the limit then runs faster (here twice as fast). That tail is no steady state: the
    capacity is the rate while requests kept arriving."""
    rng = np.random.default_rng(3)
    n, in_flight = 800, 128
    outputs = rng.integers(20, 60, n)
    records = _server(n, 8, outputs)  # 800 tok/s; FIFO, so request j starts after j - 8 end
    ends = sorted(r.end_s for r in records)
    # The loop sends request j when the (j - in_flight)-th request finishes.
    sent = [0.0 if j < in_flight else ends[j - in_flight] for j in range(n)]
    last_send = max(sent)

    def warp(t: float) -> float:  # twice as fast once nothing more arrives
        return t if t <= last_send else last_send + (t - last_send) / 2

    looped = [RequestRecord(r.request_id, sent[r.request_id], sent[r.request_id],
                            tuple(warp(t) for t in r.chunk_times_s), warp(r.end_s), 10,
                            r.output_tokens) for r in records]
    duration = max(r.end_s for r in looped)
    steady = steady_state(looped, duration)
    assert steady.saturated
    assert steady.window_s[1] <= last_send
    assert steady.output_throughput == pytest.approx(800, rel=0.02)
    # The same records read as a burst (every request sent at 0) keep the tail in the window.
    burst = [RequestRecord(r.request_id, 0.0, 0.0, r.chunk_times_s, r.end_s, 10,
                           r.output_tokens) for r in looped]
    assert steady_state(burst, duration).output_throughput > 1.05 * 800
