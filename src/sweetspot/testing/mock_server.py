"""A fast OpenAI-compatible server that streams on a programmed timeline, looking to a client like
vLLM: same chunk JSON, ``usage`` chunk, ``[DONE]``, health endpoints and ``/metrics`` names.

Lifecycle: ``serve`` (async, until cancelled) -> ``run`` (blocking, the process's one event loop,
uvloop when importable, stops on SIGINT/SIGTERM) -> ``start_mock_server`` (a child process of
``python -m sweetspot.testing.mock_server``, always stopped on exit). The timing lives in
``mock_engine``; this module turns HTTP into engine streams and engine chunks into bytes.

Streamed chunks are written by the engine's timer straight to the socket, framed as HTTP/1.1
chunks here; aiohttp only sends the headers and, when the handler returns, the final empty chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from random import Random

from aiohttp import HttpVersion11, web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sweetspot._errors import SweetspotError
from sweetspot.testing.mock_engine import MockEngine, MockServerConfig, StatsCollector, Stream

__all__ = ["ENGINE_KEY", "MockServerConfig", "build_app", "run", "serve", "start_mock_server"]

DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
MOCK_VERSION = "0.0.0+mock"  # what /version answers: parses as a version, matches no real vLLM
ENGINE_KEY = web.AppKey("engine", MockEngine)
_JSON = {"separators": (",", ":")}


def _dumps(obj: object) -> str:
    return json.dumps(obj, **_JSON)


def _error(status: int, message: str, kind: str) -> web.Response:
    """vLLM's error body: ``{"error": {message, type, param, code}}``."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status, dumps=_dumps)


def _words(content: object) -> int:
    """Whitespace-split word count of a message content (a string or a list of text parts)."""
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        return sum(len(str(p.get("text", "")).split()) for p in content if isinstance(p, dict))
    return 0


def _prompt_tokens(body: dict, chat: bool) -> int:
    if chat:
        return sum(_words(m.get("content")) for m in body.get("messages") or ()
                   if isinstance(m, dict))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str):
        prompt = prompt[0]  # a batch of prompts: the mock answers the first
    return len(prompt) if isinstance(prompt, list) else _words(prompt)


def _output_tokens(body: dict, chat: bool) -> int:
    value = body.get("max_completion_tokens") if chat else None
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {value!r}")
    return value


def _text(k0: int, k1: int) -> str:
    return "".join(f"w{k} " for k in range(k0, k1))


class _Sse:
    """One request's SSE messages, pre-rendered around the token text so that a chunk costs two
    concatenations. Field order and nulls follow vLLM's pydantic output."""

    def __init__(self, chat: bool, head: str, usage: dict | None) -> None:
        if chat:
            self.first = (f'data: {head},"choices":[{{"index":0,"delta":{{"role":"assistant",'
                          f'"content":""}},"logprobs":null,"finish_reason":null}}]}}\n\n').encode()
            self.pre = f'data: {head},"choices":[{{"index":0,"delta":{{"content":"'.encode()
            self.mid = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self.last = b'"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
        else:
            self.first = b""
            self.pre = f'data: {head},"choices":[{{"index":0,"text":"'.encode()
            tail = ',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}],"usage":null}'
            self.mid = f'","logprobs":null,"finish_reason":null{tail}\n\n'.encode()
            self.last = f'","logprobs":null,"finish_reason":"length"{tail}\n\n'.encode()
        self.end = b"data: [DONE]\n\n"
        if usage is not None:
            usage_chunk = f'data: {head},"choices":[],"usage":{_dumps(usage)}}}\n\n'
            self.end = usage_chunk.encode() + self.end

    def chunk(self, k0: int, k1: int, num_tokens: int) -> bytes:
        text = f"w{k0} " if k1 == k0 + 1 else _text(k0, k1)
        data = self.pre + text.encode() + (
            self.mid if k1 < num_tokens else self.last + self.end)
        return self.first + data if k0 == 0 else data


def _chunk_writer(transport: asyncio.Transport, sse: _Sse, num_tokens: int, chunked: bool
                  ) -> Callable[[int, int], bool]:
    def write(k0: int, k1: int) -> bool:
        if transport.is_closing():  # the client went away (or we cut the stream)
            return False
        data = sse.chunk(k0, k1, num_tokens)
        transport.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
        return True
    return write


class _MockService:
    """The HTTP face: parses requests, draws failures and drops, hands streams to the engine."""

    def __init__(self, config: MockServerConfig) -> None:
        self.config = config
        self.engine = MockEngine(config)
        self.rng = Random(config.seed)
        self.registry = CollectorRegistry()
        self.registry.register(StatsCollector(self.engine, config.model_name))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        arrival_s = time.monotonic()  # the TTFT clock starts here, as vLLM's arrival time
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            num_tokens = _output_tokens(body, chat)
            prompt_tokens = _prompt_tokens(body, chat)
        except ValueError as exc:  # JSONDecodeError is a ValueError
            return _error(400, str(exc), "BadRequestError")
        # Four draws per valid request, always, so one seed gives one trace whatever the rates.
        rng = self.rng
        u_fail, u_drop, u_point = rng.random(), rng.random(), rng.random()
        id_bits = rng.getrandbits(128)
        if u_fail < self.config.fail_rate:
            return _error(500, "mock failure (fail_rate)", "InternalServerError")
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{id_bits:032x}"
        head = _dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                       "created": int(time.time()), "model": self.config.model_name})[:-1]
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + num_tokens,
                 "completion_tokens": num_tokens}
        if not body.get("stream"):
            stream = Stream(num_tokens, prompt_tokens, None, num_tokens, None)
            if await self._run(stream, arrival_s) == "shutdown":
                return _error(503, "mock server shutting down", "ServiceUnavailableError")
            return web.Response(body=_full_body(chat, head, _text(0, num_tokens), usage),
                                content_type="application/json")
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        num_chunks = -(-num_tokens // self.config.tokens_per_chunk)
        # a dropped stream is cut after 1-3 chunks, always before its last (one-chunk streams
        # cannot be cut mid-way and end normally)
        drop_after = (1 + int(u_point * min(3, num_chunks - 1))
                      if u_drop < self.config.drop_rate and num_chunks > 1 else None)
        chunked = request.version == HttpVersion11
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        if chunked:
            response.enable_chunked_encoding()
        await response.prepare(request)
        transport = request.transport
        if transport is None:  # gone before the headers went out
            return response
        write = _chunk_writer(transport, _Sse(chat, head, usage if include_usage else None),
                              num_tokens, chunked)
        stream = Stream(num_tokens, prompt_tokens, write, self.config.tokens_per_chunk, drop_after)
        if await self._run(stream, arrival_s) in ("dropped", "shutdown"):
            transport.close()  # mid-stream, no [DONE]: the client sees a cut response
        return response  # aiohttp writes the final empty chunk, quietly skipped if disconnected

    async def _run(self, stream: Stream, arrival_s: float) -> str:
        self.engine.submit(stream, arrival_s)
        try:
            return await stream.done
        finally:
            self.engine.abort(stream)  # no-op unless this handler was cancelled midway

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.model_name
        card = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": name, "parent": None, "max_model_len": None, "permission": []}
        return web.json_response({"object": "list", "data": [card]}, dumps=_dumps)

    async def ok(self, request: web.Request) -> web.Response:
        return web.Response()

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": MOCK_VERSION})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def _full_body(chat: bool, head: str, text: str, usage: dict) -> bytes:
    """A non-streamed response, shaped as vLLM's."""
    if chat:
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                   "audio": None, "function_call": None, "tool_calls": [],
                   "reasoning_content": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length",
                  "stop_reason": None}
        head = head.replace('"chat.completion.chunk"', '"chat.completion"', 1)
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                  "stop_reason": None, "prompt_logprobs": None}
    rest = {"choices": [choice], "usage": {**usage, "prompt_tokens_details": None}}
    return f"{head},{_dumps(rest)[1:]}".encode()


def build_app(config: MockServerConfig) -> web.Application:
    """The aiohttp application; its engine is ``app[ENGINE_KEY]`` (benchmarks read its lags)."""
    service = _MockService(config)
    middlewares = []
    if config.api_key:
        expected = f"Bearer {config.api_key}"

        @web.middleware
        async def authorize(request: web.Request, handler):
            # vLLM's rule: only the /v1 routes need the key (health and metrics do not).
            if request.path.startswith("/v1") and \
                    request.headers.get("Authorization") != expected:
                return web.json_response({"error": "Unauthorized"}, status=401)
            return await handler(request)

        middlewares.append(authorize)
    app = web.Application(middlewares=middlewares)
    app[ENGINE_KEY] = service.engine
    app.router.add_post("/v1/completions", service.completions)
    app.router.add_post("/v1/chat/completions", service.chat)
    app.router.add_get("/v1/models", service.models)
    for path in ("/health", "/ping"):
        app.router.add_get(path, service.ok)
    app.router.add_post("/ping", service.ok)
    app.router.add_get("/version", service.version)
    app.router.add_get("/metrics", service.metrics)
    return app


def _base_url(host: str, port: int) -> str:
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(config: MockServerConfig, host: str = "127.0.0.1", port: int = 8000, *,
                on_ready: Callable[[str], None] | None = None,
                app: web.Application | None = None) -> None:
    """Serve until cancelled; ``on_ready(base_url)`` runs once listening (port 0: a free one)."""
    runner = web.AppRunner(app or build_app(config), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=4096).start()
        if on_ready is not None:
            on_ready(_base_url(host, runner.addresses[0][1]))
        await asyncio.Future()  # until cancelled
    finally:
        runner.app[ENGINE_KEY].close()  # let in-flight handlers return before the teardown
        await runner.cleanup()


def run(config: MockServerConfig, host: str = "127.0.0.1", port: int = 8000, *,
        on_ready: Callable[[str], None] | None = None) -> None:
    """Serve in this thread on a fresh event loop (uvloop when importable) until SIGINT/SIGTERM."""
    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=loop_factory) as r:
        r.run(_serve_until_terminated(config, host, port, on_ready))


async def _serve_until_terminated(config: MockServerConfig, host: str, port: int,
                                  on_ready: Callable[[str], None] | None) -> None:
    task = asyncio.current_task()
    assert task is not None
    with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows loops
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serve(config, host, port, on_ready=on_ready)


def _cli_args(config: MockServerConfig) -> list[str]:
    return ["--ttft-ms", repr(config.ttft_s * 1e3), "--itl-ms", repr(config.itl_s * 1e3),
            "--max-num-seqs", str(config.max_num_seqs),
            "--tokens-per-chunk", str(config.tokens_per_chunk),
            "--fail-rate", repr(config.fail_rate), "--drop-rate", repr(config.drop_rate),
            "--seed", str(config.seed), "--model-name", config.model_name,
            *(["--api-key", config.api_key] if config.api_key else [])]


@contextlib.contextmanager
def start_mock_server(config: MockServerConfig, host: str = "127.0.0.1", port: int = 0, *,
                      timeout_s: float = 30.0) -> Iterator[str]:
    """Run the mock server in a child process; yield its base URL once ``/health`` answers.
    The child is terminated (killed if it lingers) on exit, also when the body raises."""
    src_root = str(Path(__file__).resolve().parents[2])  # the child imports this very code
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (src_root, os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "sweetspot.testing.mock_server", "--host", host,
           "--port", str(port), *_cli_args(config)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    try:
        yield _wait_until_ready(proc, time.monotonic() + timeout_s)
    finally:
        _stop(proc)


def _wait_until_ready(proc: subprocess.Popen, deadline_s: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if time.monotonic() > deadline_s:
                raise SweetspotError("mock server did not start listening in time")
            if not selector.select(deadline_s - time.monotonic()):
                continue
            line = proc.stdout.readline()
            if not line:
                raise SweetspotError(f"mock server exited with code {proc.wait()} at start")
            if match := re.search(rb"listening on (\S+)", line):
                base_url = match.group(1).decode()
                break
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=1.0) as answer:
                if answer.status == 200:
                    return base_url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline_s:
            raise SweetspotError(f"mock server at {base_url} never answered /health")
        time.sleep(0.02)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sweetspot.testing.mock_server",
                                     description="OpenAI-compatible mock of a vLLM server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--drop-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-name", default="mock")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    try:
        config = MockServerConfig(
            ttft_s=args.ttft_ms / 1e3, itl_s=args.itl_ms / 1e3, max_num_seqs=args.max_num_seqs,
            tokens_per_chunk=args.tokens_per_chunk, fail_rate=args.fail_rate,
            drop_rate=args.drop_rate, seed=args.seed, model_name=args.model_name,
            api_key=args.api_key)
    except SweetspotError as exc:
        parser.exit(2, f"error: {exc}\n")
    run(config, args.host, args.port,
        on_ready=lambda url: print(f"mock server listening on {url}", flush=True))


if __name__ == "__main__":
    main()
