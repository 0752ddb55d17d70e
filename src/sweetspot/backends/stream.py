"""Reading one streamed OpenAI-style response (server-sent events) the way ``loadgen`` measures
it: when each message carrying a token arrived, the completion-token count from ``usage`` when the
server sends it, whether ``[DONE]`` came, and any error the stream itself reports.

This runs once per streamed token of every request in flight, so messages are told apart by byte
searches; only the rare ``usage`` message is parsed as JSON.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

__all__ = ["StreamProgress", "read_stream"]

_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*([^\]\s])')


@dataclass(slots=True)
class StreamProgress:
    """What a stream has said so far. Filled in as messages arrive, so a read cut short (timeout,
    disconnect) still leaves the chunks that came before it for the request's record."""

    chunks: list[float] = field(default_factory=list)  # perf_counter() of each token message
    usage_tokens: int | None = None  # completion_tokens of the latest usage message
    done: bool = False  # [DONE] arrived
    error: str | None = None  # an error message in the stream, or the stream ended early


async def read_stream(data: AsyncIterator[bytes], progress: StreamProgress) -> None:
    """Read the response body ``data`` (messages split by blank lines, possibly across reads)
    into ``progress``. Raises what the read raises; ValueError or UnicodeDecodeError for a
    ``usage`` message that is not JSON."""
    buffer = b""
    async for piece in data:
        buffer += piece
        *messages, buffer = buffer.split(b"\n\n")
        for message in messages:  # inline, not a call per message: this is the hot path
            payload = message.strip().removeprefix(b"data:").strip()
            if not payload:
                continue
            if payload == b"[DONE]":
                progress.done = True
            elif _has_choices(payload):
                progress.chunks.append(time.perf_counter())
                if b'"usage":{' in payload:  # continuous usage stats
                    progress.usage_tokens = _completion_tokens(payload, progress.usage_tokens)
            elif b'"usage"' in payload:
                progress.usage_tokens = _completion_tokens(payload, progress.usage_tokens)
            elif b'"error"' in payload:
                progress.error = f"error in stream: {payload[:200].decode(errors='replace')}"
    if not progress.done and progress.error is None:
        progress.error = "stream closed before [DONE]"


def _has_choices(payload: bytes) -> bool:
    """Whether a stream message carries a non-empty ``choices`` list. A byte search, not a JSON
    parse: this runs for every streamed token, and parsing was the client's largest own cost.
    The "choices" key comes before any text in OpenAI-style chunks, so a bracket inside the
    generated text cannot end the search early."""
    return _CHOICES.search(payload) is not None


def _completion_tokens(payload: bytes, current: int | None) -> int | None:
    event = json.loads(payload)
    usage = event.get("usage") if isinstance(event, dict) else None
    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
        return int(usage["completion_tokens"])
    return current
