"""One window of a live server: what vLLM counted between two scrapes.

A window runs from one scrape to the next. Its figures are deltas against the *last good*
snapshot (the one before the window, or before an outage): quantiles from histogram bucket
deltas, rates over the time the deltas span. A server that restarted in between — its
``process_start_time_seconds`` moved, or a counter or histogram count went backwards — is
measured from zero: everything it counted since it came back happened after the last good
scrape. The window's state says what happened, most serious first: ``server down`` (no usable
answer), ``restarted``, ``slow scrape`` (it answered, slowly: an overloaded API server),
``idle`` (no request finished), ``ok``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sweetspot.guard.lengths import LengthFit, fit_lengths
from sweetspot.guard.scrape import LogEvent, Scrape
from sweetspot.metrics.prometheus import (
    E2EL,
    ITL,
    KV_USAGE,
    QUEUE_TIME,
    TTFT,
    Histogram,
    MetricsSnapshot,
    ServerQuantiles,
    compute_server_facts,
    histogram_delta,
    histogram_quantiles,
)

__all__ = ["LATENCIES", "STATES", "Window", "add_histograms", "measure_window"]

STATES = ("ok", "idle", "slow scrape", "restarted", "server down")  # least to most serious
# Window latencies by bench's names; vLLM's histogram (current name first).
LATENCIES: Mapping[str, tuple[str, ...]] = {
    "ttft": TTFT, "tpot": ("vllm:request_time_per_output_token_seconds",), "itl": ITL,
    "e2el": E2EL, "queue": QUEUE_TIME,
}
PROMPT_LENGTHS = "vllm:request_prompt_tokens"
OUTPUT_LENGTHS = "vllm:request_generation_tokens"
START_TIME = "process_start_time_seconds"
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


@dataclass(frozen=True, slots=True)
class Window:
    """What one window saw; None where the server did not say (or was down)."""

    number: int  # 1, 2, ... since the watch began
    start_s: float  # wall clock (time.time) of the scrape that opened it
    end_s: float  # ... and of the one that closed it
    state: str  # STATES
    detail: str | None = None  # why down / how it restarted / how slow, one line
    scrape_s: float | None = None  # how long the closing scrape took
    span_s: float = 0.0  # seconds the deltas cover (longer than the window after an outage)
    latencies: Mapping[str, ServerQuantiles] = field(default_factory=dict)  # LATENCIES keys
    # the lower edge of the bucket each P99 was read in: the P99 is surely above it
    p99_floor_s: Mapping[str, float] = field(default_factory=dict)
    requests: int | None = None  # finished in the window
    request_rate: float | None = None  # finished requests / s
    arrival_rate: float | None = None  # finished + the growth of running and waiting, / s
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    preemptions: int | None = None
    preemptions_per_s: float | None = None
    kv_usage: float | None = None  # 0-1, the fullest engine at the closing scrape
    running: int | None = None  # at the closing scrape
    waiting: int | None = None
    prefix_hit_rate: float | None = None  # 0-1, hit / queried prompt tokens
    prompt_histogram: Histogram | None = None  # the window's token-count deltas
    output_histogram: Histogram | None = None
    prompt_lengths: LengthFit | None = None  # lognormal fits of those
    output_lengths: LengthFit | None = None
    log_events: tuple[LogEvent, ...] = ()  # OOMs and engine deaths the log reported


def add_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    """Two windows' deltas as one (same bucket bounds: one server's histogram)."""
    if a is None or b is None:
        return a or b
    counts = dict(a.buckets)
    return Histogram(buckets=tuple((le, c + counts.get(le, 0.0)) for le, c in b.buckets),
                     count=a.count + b.count, sum=a.sum + b.sum)


def _floor(value_s: float, delta: Histogram) -> float:
    """The lower edge of the bucket ``value_s`` was interpolated in (0 for the first)."""
    return max((le for le, _ in delta.buckets if le < value_s), default=0.0)


def restart_of(before: MetricsSnapshot, after: MetricsSnapshot) -> str | None:
    """How ``after`` shows the server restarted since ``before`` (None: it did not)."""
    start_before, start_after = before.gauge(START_TIME), after.gauge(START_TIME)
    if start_before is not None and start_after is not None and start_after > start_before + 1:
        return "the server process started again"
    for name, value in before.counters.items():
        if name.startswith("vllm:") and after.counters.get(name, value) < value:
            return f"counter {name} went back from {value:g} to {after.counters[name]:g}"
    for name, hist in before.histograms.items():
        if name.startswith("vllm:") and name in after.histograms \
                and after.histograms[name].count < hist.count:
            return f"histogram {name} counts went back"
    return None


def _aligned(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsSnapshot:
    """``before`` with every counter and histogram ``after`` has and it lacks at zero: a
    metric that first appears within the window (a label set made on first use, a server that
    has just started) counted all it holds within the window."""
    empty = {n: Histogram(buckets=tuple((le, 0.0) for le, _ in h.buckets), count=0.0, sum=0.0)
             for n, h in after.histograms.items()}
    return MetricsSnapshot(
        counters={**dict.fromkeys(after.counters, 0.0), **before.counters},
        gauges=before.gauges, gauge_peaks=before.gauge_peaks,
        histograms={**empty, **before.histograms})


def _in_flight(snapshot: MetricsSnapshot) -> float:
    return (snapshot.gauge(RUNNING) or 0.0) + (snapshot.gauge(WAITING) or 0.0)


def measure_window(number: int, start_s: float, base: Scrape, after: Scrape, *,
                   slow_scrape_s: float, log_events: Sequence[LogEvent] = ()) -> Window:
    """The window from ``start_s`` to ``after``, its deltas against ``base`` (the last scrape
    that answered)."""
    events = tuple(log_events)
    if after.snapshot is None or base.snapshot is None:
        return Window(number, start_s, after.taken_s, "server down", after.error or "no answer",
                      after.elapsed_s, log_events=events)
    restart = restart_of(base.snapshot, after.snapshot)
    before = _aligned(MetricsSnapshot() if restart else base.snapshot, after.snapshot)
    span_s = max(after.taken_s - base.taken_s, 1e-9)
    window = _figures(number, start_s, after, before, span_s, restarted=restart is not None)
    if restart:
        state, detail = "restarted", restart
    elif after.elapsed_s > slow_scrape_s:
        state, detail = "slow scrape", f"/metrics took {after.elapsed_s:.1f} s"
    elif not window.requests:
        state, detail = "idle", None
    else:
        state, detail = "ok", None
    return dataclasses.replace(window, state=state, detail=detail, log_events=events)


def _figures(number: int, start_s: float, after: Scrape, before: MetricsSnapshot,
             span_s: float, *, restarted: bool) -> Window:
    now = after.snapshot
    assert now is not None
    facts = compute_server_facts(before, now, [now])

    def rate(value: int | None) -> float | None:
        return None if value is None else value / span_s

    prompt = histogram_delta(before, now, (PROMPT_LENGTHS,))
    output = histogram_delta(before, now, (OUTPUT_LENGTHS,))
    in_flight_before = 0.0 if restarted else _in_flight(before)
    finished = facts.requests_succeeded
    latencies, floors = {}, {}
    for key, names in LATENCIES.items():
        delta = histogram_delta(before, now, names)
        if delta is not None and (q := histogram_quantiles(delta)) is not None:
            latencies[key], floors[key] = q, _floor(q.p99_s, delta)
    return Window(
        number, start_s, after.taken_s, "ok", scrape_s=after.elapsed_s, span_s=span_s,
        latencies=latencies, p99_floor_s=floors, requests=finished, request_rate=rate(finished),
        arrival_rate=None if finished is None else max(
            0.0, finished + _in_flight(now) - in_flight_before) / span_s,
        prompt_tokens_per_s=rate(facts.prompt_tokens),
        generation_tokens_per_s=rate(facts.generation_tokens),
        preemptions=facts.preemptions, preemptions_per_s=rate(facts.preemptions),
        kv_usage=now.gauge(*KV_USAGE, peak=True),
        running=facts.max_requests_running, waiting=facts.max_requests_waiting,
        prefix_hit_rate=facts.prefix_cache_hit_rate,
        prompt_histogram=prompt, output_histogram=output,
        prompt_lengths=fit_lengths(prompt.buckets, prompt.sum, prompt.count) if prompt else None,
        output_lengths=fit_lengths(output.buckets, output.sum, output.count) if output else None)
