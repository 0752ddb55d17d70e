"""The engine's main loop on a simulated clock, with the client's sends around it (see
``simulator``'s module text for the clock's conventions).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

import numpy as np

from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim.cost import StepShape, StepTime, StepTimeModel
from sweetspot.backends.sim.frontend import CHAT_INTAKE_S, ApiServer
from sweetspot.backends.sim.request import SimRequest
from sweetspot.backends.sim.scheduler import Scheduler
from sweetspot.backends.step_times import StepTimes
from sweetspot.spec.requests import Request

__all__ = ["MAX_STEPS", "EngineLoop"]

MAX_STEPS = 5_000_000  # a guard against a scheduler that stops making progress


class _Arrivals:
    """Requests sent but not yet at the engine, taken in (engine arrival, rid) order. The API
    server takes them one at a time, so they nearly always arrive in the order they are pushed:
    a deque serves them then, and a push out of order turns it into a heap (the order taken is
    the same either way: keys are unique)."""

    def __init__(self) -> None:
        self._queue: deque[tuple[float, int, SimRequest]] = deque()
        self._heap: list[tuple[float, int, SimRequest]] | None = None

    def __bool__(self) -> bool:
        return bool(self._queue if self._heap is None else self._heap)

    def push(self, req: SimRequest) -> None:
        key = (req.arrival_s, req.rid, req)
        if self._heap is not None:
            heapq.heappush(self._heap, key)
        elif not self._queue or key[:2] >= self._queue[-1][:2]:
            self._queue.append(key)
        else:
            self._heap = list(self._queue)  # sorted: already a heap
            heapq.heappush(self._heap, key)

    def first_s(self) -> float:
        return self._queue[0][0] if self._heap is None else self._heap[0][0]

    def pop(self) -> SimRequest:
        return self._queue.popleft()[2] if self._heap is None else heapq.heappop(self._heap)[2]


class EngineLoop:
    """The engine's main loop on a simulated clock, with the client's sends around it. A loop
    runs once: its counters, decode times and queues are that run's."""

    def __init__(self, scheduler: Scheduler, model: StepTimeModel, *, async_scheduling: bool,
                 max_model_len: int, max_concurrency: int | None, trace: bool,
                 offline: bool = False, endpoint: str = "completions",
                 first_step_extra_s: float = 0.0, intake_rounds: bool = True) -> None:
        self.scheduler, self.model = scheduler, model
        # A fresh server's first step also compiles what its start-up did not (cost.py).
        self._first_extra = first_step_extra_s
        self.async_scheduling = async_scheduling
        self.max_model_len = max_model_len
        self.limit = max_concurrency
        self.half_latency = 0.0 if offline else model.request_latency_s / 2
        render = CHAT_INTAKE_S if endpoint == "chat" else 0.0
        self.api = ApiServer(intake_s=0.0 if offline else model.request_intake_s,
                             render_s=0.0 if offline else render,
                             half_latency_s=self.half_latency, rounds=intake_rounds)
        self.trace = trace
        self.steps = 0
        self.batch_sum = 0
        self.max_batch = self.max_step_tokens = 0
        self._window = (0.0, 0.0)  # first and last scheduled arrival
        self._busy_in_window = 0.0
        self.compute_bound_steps: int | None = 0
        self.spec_draft_tokens = self.spec_accepted_tokens = 0
        self.starts: list[float] = []
        self.durations: list[float] = []
        self.shapes: list[StepShape] = []
        self.dtimes: list[float] = []  # end time of each decode step of this loop
        self.first_dstep = scheduler.dnext
        # V0 multi-step returns a run's tokens only when its last step is done (vLLM 0.6's
        # "tokens are streamed only after a batch of generation steps is complete"): the
        # decode steps of the run in progress, from this index of ``dtimes``, share its end.
        self._grouped = scheduler.cfg.v0 and scheduler.cfg.multi_step > 1
        self._group_first = 0
        # The client's side of one run: requests not yet sent (a concurrency limit holds them),
        # those sent but not yet at the engine by (engine arrival, rid), and how many are out.
        self._pending: deque[SimRequest] = deque()
        self._upcoming = _Arrivals()
        self._inflight = 0
        self._rejected: list[SimRequest] = []  # longer than max_model_len: refused on arrival

    def run(self, requests: Sequence[Request]) -> tuple[RequestRecord, ...]:
        """The records of ``requests``: each sent, admitted (or refused) and run to its last token.

        Invariant: at the top of each pass ``t`` is when the engine is free, and every request
        that reached the engine by ``t`` is with the scheduler (or rejected). The engine then
        runs one step from ``t`` if it has work, and otherwise idles to the next arrival."""
        sched = self.scheduler
        self._pending = deque(sorted(
            (SimRequest(r.request_id, r.prompt_tokens, r.output_tokens, r.priority, r.arrival_s,
                        r.prompt_token_ids, r.prefix_group) for r in requests),
            key=lambda q: (q.scheduled_s, q.rid)))
        sched.kv.index(self._pending)
        if self._pending:
            self._window = (self._pending[0].scheduled_s, self._pending[-1].scheduled_s)
        self._dispatch(0.0)
        t = 0.0
        ahead: float | None = None  # async: when the step now ending began (see below)
        while True:
            # Async scheduling plans the next step while the current one runs: a request that
            # reached the engine after the current step began waits for the step after next.
            # An engine with nothing planned takes it as soon as it comes.
            self._admit(t if ahead is None else ahead)
            if not sched.has_work:
                self._admit(t)
            if not sched.has_work:
                if not self._upcoming:
                    break
                t = self._upcoming.first_s()
                ahead = None
                continue
            start = t
            t = self._step(t)
            ahead = start if self.async_scheduling else None
            if self.steps > MAX_STEPS:
                raise RuntimeError("simulation exceeded its step limit")
        return self._records(sched.finished + self._rejected)

    @property
    def busy_share(self) -> float | None:
        """Busy share of the arrival window (``SimFacts.busy_share``); None when it is empty
        or the run is a closed loop (its arrivals follow its completions)."""
        first, last = self._window
        if last - first <= 0 or self.limit is not None:
            return None
        return min(1.0, self._busy_in_window / (last - first))

    def _dispatch(self, now: float) -> None:
        """Send held requests while the concurrency limit has room; each reaches the engine
        once the API server has taken it (those sent together, in one round)."""
        sent: list[SimRequest] = []
        while self._pending and (self.limit is None or self._inflight < self.limit):
            req = self._pending.popleft()
            req.sent_s = max(req.scheduled_s, now)
            req.slot_wait_s = req.sent_s - req.scheduled_s
            self._inflight += 1
            sent.append(req)
        if sent:
            arrivals = self.api.take_all([req.sent_s for req in sent])
            for req, arrival in zip(sent, arrivals, strict=True):
                req.arrival_s = arrival
                self._upcoming.push(req)

    def _release(self, at: float) -> None:
        """A request's answer reached the client at ``at``: its slot sends the next one."""
        self._inflight -= 1
        self._dispatch(at)

    def _admit(self, t: float) -> None:
        """Hand the scheduler every request that reached the engine by ``t``; one longer than
        max_model_len is refused at once, with vLLM's HTTP 400."""
        while self._upcoming and self._upcoming.first_s() <= t:
            req = self._upcoming.pop()
            if req.prompt_len + req.output_len > self.max_model_len:
                req.error = (
                    f"HTTP 400: This model's maximum context length is {self.max_model_len}"
                    f" tokens. However, you requested {req.prompt_len + req.output_len} "
                    f"tokens ({req.prompt_len} in the messages, {req.output_len} in the "
                    "completion).")
                self._rejected.append(req)
                self._release(req.arrival_s + self.half_latency)
                continue
            self.scheduler.add(req)

    def _step(self, t: float) -> float:
        """One engine step from ``t``: schedule, time it, count it, complete what finished.
        Returns when the step ends."""
        sched = self.scheduler
        plan = sched.schedule()
        if plan is None:  # nothing fits although nothing runs: cannot happen after start-up
            raise RuntimeError("simulated scheduler made no progress")
        step = self.model.step_time(plan.shape, async_scheduling=self.async_scheduling,
                                    cpu_scheduled=plan.cpu_scheduled)
        if self._first_extra:
            step = StepTime(step.duration_s + self._first_extra, step.compute_bound)
            self._first_extra = 0.0
        if self.trace:
            self.starts.append(t)
            self.durations.append(step.duration_s)
            self.shapes.append(plan.shape)
        t += step.duration_s
        self.steps += 1
        self.batch_sum += plan.shape.num_seqs
        self.max_batch = max(self.max_batch, plan.shape.num_seqs)
        self.max_step_tokens = max(self.max_step_tokens, plan.shape.num_tokens)
        if t - step.duration_s < self._window[1]:
            self._busy_in_window += min(t, self._window[1]) - max(t - step.duration_s,
                                                                   self._window[0])
        if step.compute_bound is None:
            self.compute_bound_steps = None
        elif self.compute_bound_steps is not None and step.compute_bound:
            self.compute_bound_steps += 1
        if self._grouped and plan.cpu_scheduled:
            self._close_group()
        if plan.decodes:
            self.dtimes.append(t)
        done = sched.complete(plan, t)
        if done:  # their answers reach the client together: their slots send the next ones
            self._inflight -= len(done)
            self._dispatch(self.api.streamed(t))
        return t

    def _close_group(self) -> None:
        """The multi-step run in progress has ended: its tokens reach the API server now."""
        if self._group_first < len(self.dtimes):
            end = self.dtimes[-1]
            self.dtimes[self._group_first:] = [end] * (len(self.dtimes) - self._group_first)
        self._group_first = len(self.dtimes)

    def _records(self, reqs: list[SimRequest]) -> tuple[RequestRecord, ...]:
        if self._grouped:
            self._close_group()
        # Decode steps before this loop (a warm-up's) have no times here: pad their indices.
        dtimes = np.concatenate((np.zeros(self.first_dstep),
                                 self.api.streamed_all(np.asarray(self.dtimes, dtype=np.float64))))
        dtimes.flags.writeable = False
        records: list[RequestRecord] = []
        for req in sorted(reqs, key=lambda q: q.rid):
            pieces = req.pieces
            req.pieces = []  # read once, here: its memory goes to the records being made
            if req.error is not None:
                records.append(RequestRecord(
                    req.rid, req.scheduled_s, req.sent_s, (), None, req.prompt_len, 0,
                    req.priority, req.prefix_group, req.error, req.slot_wait_s))
                continue
            times, tokens = self._token_times(req, pieces, dtimes)
            end = times.last if isinstance(times, StepTimes) else times[-1]
            records.append(RequestRecord(
                req.rid, req.scheduled_s, req.sent_s, times, end, req.prompt_len,
                tokens, req.priority, req.prefix_group, None, req.slot_wait_s))
        return tuple(records)

    def _token_times(self, req: SimRequest, pieces: list, dtimes: np.ndarray
                     ) -> tuple[StepTimes | tuple[float, ...], int]:
        """A finished request's token times and output tokens from its timeline ``pieces``.
        One that decoded in a single run (no preemption) gets ``StepTimes``: its first token's
        time and a slice of the decode-step times; any other a tuple."""
        times: list[float] = []
        tokens = 0
        single_run = not self._grouped and len(pieces) == 2 and isinstance(pieces[0], float)
        for piece in pieces:
            if isinstance(piece, float):
                times.append(self.api.streamed(piece))
                tokens += 1
                continue
            start, steps, emit = piece
            if not single_run:
                times.extend(dtimes[start:start + steps].tolist())
            if emit is None:
                tokens += steps
            else:
                emitted = int(emit[:steps].sum())
                tokens += emitted
                self.spec_draft_tokens += self.scheduler.cfg.spec_tokens * steps
                self.spec_accepted_tokens += emitted - steps
        if single_run:
            start, steps, _ = pieces[1]
            return StepTimes(times[0], dtimes, start, start + steps), tokens
        if self._grouped:  # one streamed message per multi-step run
            times = [x for i, x in enumerate(times) if i == 0 or x != times[i - 1]]
        return tuple(times), tokens
