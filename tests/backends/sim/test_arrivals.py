"""The engine loop's queue of sent requests gives them in (arrival, rid) order, whether they
were pushed in that order (a deque) or not (it turns into a heap): as a heap of them would."""

from __future__ import annotations

import heapq
import random

import pytest

from sweetspot.backends.sim.loop import _Arrivals
from sweetspot.backends.sim.request import SimRequest


def _req(rid: int, arrival_s: float) -> SimRequest:
    req = SimRequest(rid, 10, 5, 0, 0.0, ())
    req.arrival_s = arrival_s
    return req


@pytest.mark.parametrize("ordered", [True, False])
def test_requests_come_out_as_from_a_heap(ordered: bool) -> None:
    rng = random.Random(3)
    reqs = [_req(i, float(rng.randrange(5))) for i in range(60)]
    if ordered:
        reqs.sort(key=lambda r: (r.arrival_s, r.rid))
    queue, heap = _Arrivals(), []
    out, expected = [], []
    for i, req in enumerate(reqs):
        queue.push(req)
        heapq.heappush(heap, (req.arrival_s, req.rid, req))
        if i % 3 == 2:  # takes interleaved with pushes, as the loop does
            assert queue.first_s() == heap[0][0]
            out.append(queue.pop())
            expected.append(heapq.heappop(heap)[2])
    while queue:
        out.append(queue.pop())
        expected.append(heapq.heappop(heap)[2])
    assert out == expected and not heap
