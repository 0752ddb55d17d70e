"""The waiting queue per scheduling policy: backends/sim/request_queue.py."""

from sweetspot.backends.sim.request import SimRequest
from sweetspot.backends.sim.request_queue import FcfsQueue, PriorityQueue, request_queue


def _req(rid: int, priority: int = 0, arrival_s: float = 0.0) -> SimRequest:
    return SimRequest(rid, 8, 4, priority, arrival_s, (), arrival_s=arrival_s)


def _drain(queue) -> list[int]:
    out = []
    while (req := queue.peek()) is not None:
        out.append(req.rid)
        queue.pop()
    return out


def test_fcfs_keeps_arrival_order_and_a_preempted_request_goes_first() -> None:
    queue = request_queue(priority=False)
    assert isinstance(queue, FcfsQueue) and not queue
    for rid in range(3):
        queue.add(_req(rid))
    queue.requeue(_req(9))
    assert queue and _drain(queue) == [9, 0, 1, 2]


def test_priority_serves_lowest_priority_then_arrival_then_id() -> None:
    queue = request_queue(priority=True)
    assert isinstance(queue, PriorityQueue) and queue.peek() is None
    queue.add(_req(0, priority=1, arrival_s=0.0))
    queue.add(_req(1, priority=0, arrival_s=2.0))
    queue.add(_req(2, priority=0, arrival_s=1.0))
    queue.requeue(_req(3, priority=0, arrival_s=1.0))
    assert _drain(queue) == [2, 3, 1, 0]
