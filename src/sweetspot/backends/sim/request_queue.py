"""The scheduler's waiting queue, one class per scheduling policy, as in vLLM
(``vllm/v1/core/sched/request_queue.py``).

``fcfs``: arrival order, and a preempted request goes back to the front. ``priority``: lowest
(priority, arrival) first, ties by request id, and a preempted request takes its place by that
key again.
"""

from __future__ import annotations

import heapq
from collections import deque

from sweetspot.backends.sim.request import SimRequest

__all__ = ["FcfsQueue", "PriorityQueue", "RequestQueue", "request_queue"]


class FcfsQueue:
    def __init__(self) -> None:
        self._queue: deque[SimRequest] = deque()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def add(self, req: SimRequest) -> None:
        self._queue.append(req)

    def peek(self) -> SimRequest | None:
        return self._queue[0] if self._queue else None

    def pop(self) -> None:
        self._queue.popleft()

    def requeue(self, req: SimRequest) -> None:
        """A preempted request: first in line again."""
        self._queue.appendleft(req)


class PriorityQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, SimRequest]] = []

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, req: SimRequest) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival_s, req.rid, req))

    def peek(self) -> SimRequest | None:
        return self._heap[0][3] if self._heap else None

    def pop(self) -> None:
        heapq.heappop(self._heap)

    def requeue(self, req: SimRequest) -> None:
        """A preempted request: back in by its (priority, arrival) key."""
        self.add(req)


RequestQueue = FcfsQueue | PriorityQueue


def request_queue(priority: bool) -> RequestQueue:
    """The waiting queue for ``scheduling_policy`` priority (True) or fcfs (False)."""
    return PriorityQueue() if priority else FcfsQueue()
