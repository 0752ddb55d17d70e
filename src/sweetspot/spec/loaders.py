"""Workloads from files: a YAML/JSON ``WorkloadSpec``, or recorded traffic — ShareGPT JSON,
JSONL (sweetspot's and ``vllm bench``'s custom format) — which becomes a ``WorkloadSpec`` whose
``trace`` replays the recorded requests.

Lengths: a line may give token counts (``prompt_tokens``, ``output_tokens``); text without counts
is counted with the model's tokenizer when the caller gives one (``count_tokens``,
``spec.tokens.tokenizer_counter``), else estimated at ``TOKENS_PER_CHAR`` (about 4 characters per
token), and the workload's description says which. ShareGPT conversations are filtered as
``vllm bench serve`` filters them (both sides at least 4 tokens, prompt at most 1024, prompt +
output at most 2048).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sweetspot._errors import SweetspotError
from sweetspot.spec.tokens import TOKENS_PER_CHAR, TokenCounter, estimate_tokens
from sweetspot.spec.workload import (
    PRESETS,
    ArrivalSpec,
    Empirical,
    TraceEntry,
    WorkloadSpec,
    preset,
    validate_workload,
)

__all__ = ["TOKENS_PER_CHAR", "estimate_tokens", "load_trace_file", "load_workload"]

SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048


def _sharegpt(data: list[object], origin: str, count: TokenCounter) -> list[TraceEntry]:
    entries = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        try:
            prompt, answer = str(turns[0]["value"]), str(turns[1]["value"])
        except (KeyError, TypeError):
            raise SweetspotError(f"malformed ShareGPT file {origin}: a turn lacks 'value'"
                                 ) from None
        p, o = count(prompt), count(answer)
        if (p < SHAREGPT_MIN_TOKENS or o < SHAREGPT_MIN_TOKENS or p > SHAREGPT_MAX_PROMPT
                or p + o > SHAREGPT_MAX_TOTAL):
            continue
        entries.append(TraceEntry(prompt_tokens=p, output_tokens=o, prompt_text=prompt))
    return entries


_OUTPUT_KEYS = ("output_tokens", "max_tokens", "output_len", "completion_tokens")


def _jsonl_entry(line: dict[str, Any], where: str, count: TokenCounter) -> TraceEntry:
    text = line.get("prompt")
    prompt_tokens = line.get("prompt_tokens", line.get("prompt_len"))
    if prompt_tokens is None:
        if not isinstance(text, str):
            raise SweetspotError(f"{where}: needs 'prompt' text or 'prompt_tokens'")
        prompt_tokens = count(text)
    output = next((line[k] for k in _OUTPUT_KEYS if k in line), None)
    if output is None:
        raise SweetspotError(f"{where}: needs 'output_tokens' (or max_tokens / output_len)")
    timestamp = line.get("timestamp", line.get("arrival_s"))
    try:
        return TraceEntry(
            prompt_tokens=int(prompt_tokens),
            output_tokens=int(output),
            arrival_s=None if timestamp is None else float(timestamp),
            priority=int(line.get("priority", 0)),
            prompt_text=text if isinstance(text, str) else None,
        )
    except (TypeError, ValueError) as exc:
        message = str(exc).splitlines()[0]
        raise SweetspotError(f"{where}: {message}") from None


def _jsonl(text: str, origin: str, count: TokenCounter) -> list[TraceEntry]:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"malformed workload file {origin}, line {number}"
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SweetspotError(f"{where}: {exc.msg}") from None
        if not isinstance(line, dict):
            raise SweetspotError(f"{where}: expected a JSON object")
        entries.append(_jsonl_entry(line, where, count))
    return entries


class _Counting:
    """A token counter that remembers whether it was asked (the workload says how its text
    was measured only when some was)."""

    def __init__(self, count: TokenCounter | None) -> None:
        self.count, self.tokenizer, self.used = count or estimate_tokens, count is not None, False

    def __call__(self, text: str) -> int:
        self.used = True
        return self.count(text)

    @property
    def note(self) -> str:
        if not self.used:
            return ""
        return ("; text counted with the tokenizer" if self.tokenizer else "; text without "
                "token counts estimated at 4 characters a token (--tokenizer counts them)")


def _spec(name: str, entries: list[TraceEntry], origin: str, note: str) -> WorkloadSpec:
    if not entries:
        raise SweetspotError(f"workload file {origin} holds no usable request")
    timed = all(e.arrival_s is not None for e in entries)
    return WorkloadSpec(
        name=name,
        prompt=Empirical(kind="empirical", values=tuple(e.prompt_tokens for e in entries)),
        output=Empirical(kind="empirical", values=tuple(e.output_tokens for e in entries)),
        arrival=ArrivalSpec(process="trace") if timed else ArrivalSpec(process="inf"),
        num_requests=len(entries),
        trace=tuple(entries),
        description=f"recorded requests from {origin}{note}",
    )


def load_trace_file(path: Path, count_tokens: TokenCounter | None = None
                    ) -> WorkloadSpec | None:
    """A workload from a recorded-traffic file, or None when ``path`` is a spec file instead;
    text without token counts is counted by ``count_tokens`` (default: estimated)."""
    count = _Counting(count_tokens)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SweetspotError(f"cannot read workload file {path}: {exc}") from None
    if path.suffix == ".jsonl":
        entries = _jsonl(text, str(path), count)
        return _spec(path.stem, entries, str(path), count.note)
    if path.suffix != ".json":
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SweetspotError(f"cannot read workload file {path}: {exc.msg} "
                             f"(line {exc.lineno})") from None
    if isinstance(data, list):
        entries = _sharegpt(data, str(path), count)
        return _spec(path.stem, entries, str(path), count.note)
    return None


def load_workload(ref: str, count_tokens: TokenCounter | None = None) -> WorkloadSpec:
    """A preset name, a YAML/JSON spec file, a ShareGPT JSON file or a JSONL trace (its text
    counted by ``count_tokens``, default: estimated)."""
    if ref in PRESETS:
        return preset(ref)
    path = Path(ref)
    if not path.is_file():
        raise SweetspotError(
            f"unknown workload {ref!r}: not a file and not a preset ({', '.join(PRESETS)})"
        )
    traced = load_trace_file(path, count_tokens)
    if traced is not None:
        return traced
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SweetspotError(f"cannot read workload file {ref}: {first_line}") from None
    if not isinstance(data, dict):
        raise SweetspotError(f"malformed workload file {ref}: expected a mapping at top level")
    data.setdefault("name", path.stem)
    return validate_workload(data, f"file {ref}")
