"""Reading what a vLLM server says in its log: start-up facts, and why it failed.

Start-up lines (vllm-facts.md): from 0.30 one line, ``<DEV> KV cache size: N tokens, Maximum
concurrency for M tokens per request: X.XXx``; up to 0.27 two lines, ``GPU KV cache size: N
tokens`` and ``Maximum concurrency for M tokens per request: X.XXx``; also ``Available KV cache
memory: X GiB`` and ``Model loading took X GiB memory and Y seconds``.

Failures are classified by the first decisive line, checked in this order: ``oom`` (weights do
not fit, no memory for cache blocks, max-model-len beyond the KV cache, CUDA out of memory),
``invalid`` (argument parsing or configuration validation), else ``crash``. A start-up that ran
past its deadline is ``timeout`` (the caller knows that, not the log).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sweetspot.backends.base import ServerFacts

__all__ = ["Failure", "classify_failure", "parse_startup"]

_KV_TOKENS = re.compile(r"(GPU|CPU|XPU|TPU|\w+)? ?KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_LOADING = re.compile(r"Model loading took ([\d.]+) ?GiB(?: memory)? and ([\d.]+) s")
# The CPU build says neither of the two above; it logs these instead.
_CPU_LOADING = re.compile(r"Initializing model took ([\d.]+) s")
_CPU_KV_SPACE = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_startup(log: str) -> ServerFacts:
    """The start-up facts the log states (None where it does not)."""
    kv = _KV_TOKENS.search(log)
    conc = _CONCURRENCY.search(log)
    avail = _AVAILABLE.search(log)
    loading = _LOADING.search(log)
    cpu_loading = _CPU_LOADING.search(log)
    avail = avail or _CPU_KV_SPACE.search(log)
    engine = _ENGINE_INIT.search(log)
    gib = 1024**3
    load_s = (float(loading.group(2)) if loading
              else float(cpu_loading.group(1)) if cpu_loading else None)
    return ServerFacts(
        kv_cache_tokens=_int(kv.group(2)) if kv else None,
        max_concurrency=float(conc.group(2)) if conc else None,
        max_model_len=_int(conc.group(1)) if conc else None,
        kv_cache_bytes=int(float(avail.group(1)) * gib) if avail else None,
        model_load_bytes=int(float(loading.group(1)) * gib) if loading else None,
        model_load_s=load_s,
        device=(kv.group(1) or None) if kv else None,
        engine_init_s=float(engine.group(1)) if engine else None,
    )


@dataclass(frozen=True, slots=True)
class Failure:
    status: str  # "oom", "invalid" or "crash"
    cause: str  # the decisive line, as vLLM wrote it
    lines: tuple[str, ...]  # the decisive line with a little context


# (status, pattern) in the order they are tried; the first pattern found anywhere wins.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (status, re.compile(pattern)) for status, pattern in (
        ("oom", r"No available memory for the cache blocks"),
        ("oom", r"To serve at least one request with the models?'s? max seq len"),
        ("oom", r"is less than desired GPU memory utilization"),
        ("oom", r"Failed to load model - not enough GPU memory"),
        ("oom", r"(torch\.)?(cuda\.)?OutOfMemoryError|CUDA out of memory"),
        ("invalid", r"error: (argument|unrecognized arguments|the following arguments)"),
        ("invalid", r"invalid (int|float|choice|\w+) value"),
        ("invalid", r"validation errors? for \w+Config"),
        ("invalid", r"User-specified max_model_len .* is greater than the derived"),
        ("invalid", r"must be (greater than or equal to|divisible by)"),
    )
)
_ERROR_LINE = re.compile(r"(Error|Exception|error:)")


def classify_failure(log: str) -> Failure:
    """Why a server died, from its log."""
    lines = log.splitlines()
    for status, pattern in _RULES:
        for index, line in enumerate(lines):
            if pattern.search(line):
                return Failure(status, line.strip(), tuple(lines[max(0, index - 2):index + 3]))
    for index in range(len(lines) - 1, -1, -1):
        if _ERROR_LINE.search(lines[index]):
            return Failure("crash", lines[index].strip(),
                           tuple(lines[max(0, index - 2):index + 3]))
    tail = tuple(lines[-5:])
    return Failure("crash", tail[-1].strip() if tail else "the server exited without a word",
                   tail)
