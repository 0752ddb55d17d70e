"""The load generator: a workload's requests turned into streamed HTTP calls and per-request
records, measured the way ``vllm bench serve`` measures them (each response's stream is read by
``stream.read_stream``).

Invariants:
- Every time is ``time.perf_counter()`` (CLOCK_MONOTONIC on Linux, shared by all processes)
  minus the run's start ``t0``, taken just before the first send.
- A request's timer starts just before its POST, after any wait for a concurrency slot; the wait
  itself shows as client lag (sent minus scheduled), which vLLM's client hides.
- Requests are released at absolute deadlines ``t0 + arrival_s``, never by sleeping for gaps,
  so pacing errors do not accumulate.
- A failed request (HTTP error, disconnect, timeout, stream cut before ``[DONE]``) is a record
  with its cause; nothing raises out of a run once it has started.
- One ``ClientSession`` per process, unbounded connection pool, a large read buffer (aiohttp's
  64 KiB default distorts long outputs). Above ``RATE_PER_PROCESS`` req/s the requests are
  sharded round-robin over worker processes, each with its own event loop.
- ``realtime``: the client's threads (and its worker processes) run SCHED_FIFO for the run and
  return to their policy afterwards; nothing they start inherits it (SCHED_RESET_ON_FORK), so a
  vLLM server launched beside it stays an ordinary process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import multiprocessing
import os
import queue as queue_module
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from sweetspot._errors import SweetspotError
from sweetspot.backends.records import RequestRecord
from sweetspot.backends.stream import StreamProgress, read_stream
from sweetspot.spec.requests import Request

__all__ = ["LoadConfig", "LoadRun", "check_server", "client_priority", "run_load"]

T = TypeVar("T")

READ_BUFFER_BYTES = 16 * 1024 * 1024
# One event loop keeps client lag under a millisecond up to about this rate on one core.
RATE_PER_PROCESS = 800.0
# Sharded runs start this long after the last worker is ready (its loop and session start).
START_MARGIN_S = 0.1
# SCHED_FIFO priority of a real-time client: above every normal process, far below the kernel's
# own real-time threads (50+).
REALTIME_PRIORITY = 10


@dataclass(frozen=True, slots=True)
class LoadConfig:
    base_url: str  # e.g. http://127.0.0.1:8000
    model: str  # the served model name sent in each request
    endpoint: str = "completions"  # "completions" (token-id prompts) or "chat"
    max_concurrency: int | None = None  # requests in flight at most (None: unbounded)
    timeout_s: float = 600.0  # per request, connect to last byte
    warmup_requests: int = 0  # sent before t0, not recorded
    ignore_eos: bool = True  # outputs have exactly max_tokens tokens
    extra_body: dict[str, Any] = field(default_factory=dict)
    processes: int = 0  # worker processes; 0 = decide from the request rate
    realtime: bool = False  # the client runs SCHED_FIFO (see ``client_priority``)
    # Sent with every request: an API key's "Authorization: Bearer ..." and --header items.
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path


@dataclass(frozen=True, slots=True)
class LoadRun:
    records: tuple[RequestRecord, ...]  # ordered by request id
    duration_s: float  # t0 to the end of the last response
    processes: int


@contextlib.contextmanager
def client_priority(realtime: bool) -> Iterator[None]:
    """Run the calling thread real-time (SCHED_FIFO) inside the block, when ``realtime``.

    A client on the same few cores as a CPU-build vLLM server (whose engine core and worker
    busy-spin) goes unscheduled for up to seconds, then reads whole answers at once: TTFT
    swallows the decode and TPOT reads near 0 (measured with ss on a 2-vCPU VM: the bytes sat
    in the client's receive queue). Real-time took such requests from 19-43 of 48 to 0 of 48.
    The client mostly waits in epoll, so it takes little CPU from the server. Threads and
    processes started inside do not inherit the policy (SCHED_RESET_ON_FORK).
    Needs root or CAP_SYS_NICE: otherwise a ``SweetspotError``, before anything is sent."""
    if not realtime:
        yield
        return
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(REALTIME_PRIORITY))
    except (OSError, AttributeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SweetspotError(f"a real-time client needs root or CAP_SYS_NICE (and Linux): "
                             f"{reason}") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # back to the policy it had
            os.sched_setscheduler(0, policy & ~os.SCHED_RESET_ON_FORK, param)


def _payload(request: Request, config: LoadConfig) -> dict[str, Any]:
    body: dict[str, Any] = {"model": config.model, "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True},
                            "ignore_eos": config.ignore_eos}
    if config.endpoint == "chat":
        text = request.prompt_text or " ".join(f"w{i}" for i in request.prompt_token_ids)
        body["messages"] = [{"role": "user", "content": text}]
        body["max_completion_tokens"] = request.output_tokens
    else:
        body["prompt"] = list(request.prompt_token_ids)
        body["max_tokens"] = request.output_tokens
    if request.priority:
        body["priority"] = request.priority  # vLLM rejects a non-zero priority under fcfs
    body.update(config.extra_body)
    return body


async def _send(session: aiohttp.ClientSession, request: Request, config: LoadConfig,
                t0: float, slot_wait_s: float = 0.0) -> RequestRecord:
    """One streamed request; every outcome becomes a record."""
    progress = StreamProgress()
    error: str | None = None
    sent = time.perf_counter()
    try:
        async with session.post(config.url, json=_payload(request, config)) as response:
            if response.status != 200:
                body = (await response.text())[:200]
                error = f"HTTP {response.status}: {' '.join(body.split())}"
            else:
                await read_stream(response.content.iter_any(), progress)
                error = progress.error
    except TimeoutError:
        error = f"timeout after {config.timeout_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}".strip(": ")
    except (ValueError, UnicodeDecodeError) as exc:
        error = f"unreadable stream message: {exc}"
    chunks = progress.chunks
    ok = error is None and bool(chunks)
    if error is None and not chunks:
        error = "no token in the response"
    return RequestRecord(
        request_id=request.request_id,
        scheduled_s=request.arrival_s,
        sent_s=sent - t0,
        chunk_times_s=tuple(c - t0 for c in chunks),
        end_s=chunks[-1] - t0 if ok else None,
        prompt_tokens=request.prompt_tokens,
        output_tokens=(progress.usage_tokens if progress.usage_tokens is not None
                       else len(chunks)),
        priority=request.priority,
        prefix_group=request.prefix_group,
        error=error,
        slot_wait_s=slot_wait_s,
    )


def _session(config: LoadConfig) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        headers=dict(config.headers),
        connector=aiohttp.TCPConnector(limit=0, force_close=False),
        timeout=aiohttp.ClientTimeout(total=config.timeout_s),
        read_bufsize=READ_BUFFER_BYTES,
    )


async def _prepare(session: aiohttp.ClientSession, config: LoadConfig,
                   warmup: Sequence[Request]) -> None:
    """Before t0: open a connection and load aiohttp's lazily built parts with one GET of
    ``/v1/models``, then send the warm-up requests, so the first timed request pays for
    neither."""
    try:
        async with session.get(config.base_url.rstrip("/") + "/v1/models") as response:
            await response.read()
    except (aiohttp.ClientError, TimeoutError):
        pass  # the timed requests will record whatever is wrong
    if warmup:
        await asyncio.gather(*(_send(session, r, config, 0.0) for r in warmup))


async def _dispatch(session: aiohttp.ClientSession, requests: Sequence[Request],
                    config: LoadConfig, t0: float,
                    on_done: Callable[[], None] | None) -> list[RequestRecord]:
    """Send ``requests`` at their deadlines ``t0 + arrival_s`` from this event loop."""
    limit = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else None

    async def one(request: Request) -> RequestRecord:
        if limit is None:
            record = await _send(session, request, config, t0)
        else:
            due = t0 + request.arrival_s
            async with limit:
                waited = max(0.0, time.perf_counter() - max(due, t0))
                record = await _send(session, request, config, t0, waited)
        if on_done is not None:
            on_done()
        return record

    tasks = []
    for request in sorted(requests, key=lambda r: r.arrival_s):
        delay = t0 + request.arrival_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(request)))
    return list(await asyncio.gather(*tasks))


def _worker(requests: list[Request], config: LoadConfig, queue, start, t0_value) -> None:
    """A shard in its own process: prepares its session, says it is ready, waits for the
    common t0, sends, and returns its records through ``queue``."""
    async def main() -> list[RequestRecord]:
        async with _session(config) as session:
            await _prepare(session, config, ())
            queue.put(("ready", None))
            await asyncio.get_running_loop().run_in_executor(None, start.wait)
            return await _dispatch(session, requests, config, t0_value.value,
                                   lambda: queue.put(("done", 1)))

    with client_priority(config.realtime):
        records = _run(main())
    queue.put(("records", records))


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` to completion on uvloop's event loop (``uvloop.run``: no global loop
    policy, which Python 3.14 deprecates), or asyncio's where uvloop is missing (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _processes(requests: Sequence[Request], config: LoadConfig) -> int:
    if config.processes:
        return config.processes
    if len(requests) < 2:
        return 1
    span = max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)
    rate = len(requests) / span if span > 0 else math.inf
    wanted = math.ceil(rate / RATE_PER_PROCESS) if math.isfinite(rate) else 1
    return max(1, min(wanted, multiprocessing.cpu_count(), 8))


def request_headers(api_key: str | None, items: Sequence[str] = ()
                    ) -> tuple[tuple[str, str], ...]:
    """``Authorization: Bearer KEY`` for ``api_key`` (as vLLM's ``--api-key`` expects), then
    each ``Name: value`` of ``items`` (``--header``); a one-line error for a malformed one."""
    headers = [("Authorization", f"Bearer {api_key}")] if api_key else []
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or any(c in name for c in " \t\r\n") or \
                any(c in value for c in "\r\n"):
            raise SweetspotError(f"bad --header {item.split(':')[0]!r}...: expected "
                                 "'Name: value'")
        headers.append((name.strip(), value.strip()))
    return tuple(headers)


AUTH_STATUSES = (401, 403)  # the server wants a (valid) API key
AUTH_HINT = "the server wants an API key: pass --api-key (or set OPENAI_API_KEY or VLLM_API_KEY)"


async def check_server(base_url: str, timeout_s: float = 5.0,
                       headers: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The model ids a server offers; a one-line error when it cannot be reached."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SweetspotError(f"not a server URL: {base_url!r} (expected http://HOST:PORT or "
                             "https://HOST)")
    url = base_url.rstrip("/") + "/v1/models"
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, headers=dict(headers)) as s, \
                s.get(url) as response:
            if response.status in AUTH_STATUSES:
                raise SweetspotError(f"{url} answered HTTP {response.status}: {AUTH_HINT}")
            if response.status != 200:
                raise SweetspotError(f"{url} answered HTTP {response.status}")
            data = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise SweetspotError(f"cannot reach {base_url}: {reason}") from None
    except ValueError:
        raise SweetspotError(f"{url} did not answer with JSON") from None
    return [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]


def run_load(requests: Sequence[Request], config: LoadConfig,
             on_done: Callable[[], None] | None = None) -> LoadRun:
    """Run ``requests`` against the server and return their records (blocking; starts its own
    event loop, so call it from synchronous code at the CLI edge)."""
    if not requests:
        raise SweetspotError("no requests to send")
    workers = _processes(requests, config)
    warmup = [Request(-1 - i, 0.0, requests[0].prompt_token_ids, 16)
              for i in range(config.warmup_requests)]
    with client_priority(config.realtime):
        if workers == 1:
            async def main() -> tuple[list[RequestRecord], float, float]:
                async with _session(config) as session:
                    await _prepare(session, config, warmup)
                    t0 = time.perf_counter()
                    records = await _dispatch(session, requests, config, t0, on_done)
                    return records, t0, time.perf_counter()

            records, t0, t_end = _run(main())
        else:
            records, t0, t_end = _run_sharded(requests, config, workers, warmup, on_done)
    records = sorted(records, key=lambda r: r.request_id)
    ends = [r.end_s for r in records if r.end_s is not None]
    duration = max(ends) if ends else t_end - t0
    return LoadRun(tuple(records), duration, workers)


def _run_sharded(requests: Sequence[Request], config: LoadConfig, workers: int,
                 warmup: Sequence[Request], on_done: Callable[[], None] | None
                 ) -> tuple[list[RequestRecord], float, float]:
    shard_config = config
    if config.max_concurrency:
        per = max(1, config.max_concurrency // workers)
        shard_config = dataclasses.replace(config, max_concurrency=per)
    if warmup:
        async def warm() -> None:
            async with _session(config) as session:
                await _prepare(session, config, warmup)

        _run(warm())
    context = multiprocessing.get_context("spawn")
    queue, start, t0_value = context.Queue(), context.Event(), context.Value("d", 0.0)
    shards = [list(requests[i::workers]) for i in range(workers)]
    procs = [context.Process(target=_worker, args=(s, shard_config, queue, start, t0_value),
                             daemon=True) for s in shards]
    for proc in procs:
        proc.start()
    records: list[RequestRecord] = []
    finished = ready = 0
    t0 = 0.0
    try:
        while finished < workers:
            try:
                kind, value = queue.get(timeout=1.0)
            except queue_module.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    break  # a worker died: its requests are recorded as failed below
                continue
            if kind == "ready":
                ready += 1
                if ready == workers:  # every worker has started: one t0 for all, just ahead
                    t0 = t0_value.value = time.perf_counter() + START_MARGIN_S
                    start.set()
            elif kind == "records":
                records.extend(value)
                finished += 1
            elif on_done is not None:
                on_done()
    finally:
        start.set()  # release workers still waiting, should the loop have ended early
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    seen = {r.request_id for r in records}
    records += [_lost(r, "client worker process died") for r in requests
                if r.request_id not in seen]
    return records, t0, time.perf_counter()


def _lost(request: Request, error: str) -> RequestRecord:
    return RequestRecord(request.request_id, request.arrival_s, request.arrival_s, (), None,
                         request.prompt_tokens, 0, request.priority, request.prefix_group,
                         error)
