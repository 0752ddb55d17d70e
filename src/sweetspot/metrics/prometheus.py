"""What the server saw during a run, from vLLM's Prometheus ``/metrics`` text.

- A snapshot sums each metric over its label sets (vLLM labels samples by model_name and engine):
  counters under their base name (``_total`` dropped, whether or not the parser already dropped
  it), gauges, and histograms as cumulative counts per bucket upper bound (``le``).
- Facts over a run come from a snapshot before and one after: counter deltas (None when either
  snapshot lacks the counter, or it went backwards: the server restarted), ratios of deltas, and
  quantiles of the run's observations alone — the delta of the bucket counts — interpolated
  linearly inside the bucket as Prometheus' ``histogram_quantile`` does.
- Gauges are instants, so their peaks come from samples taken during the run (KV usage also from
  the after snapshot). KV usage is a 0–1 fraction per engine: its peak is the fullest engine's,
  not a sum over engines.
- A metric the server does not export gives a None field, never an exception.
- ``metric_names(release)``: the names one vLLM release exports, for queries written before any
  server answers (Prometheus rules, dashboards); the facts are ``engine/releases.py``'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from sweetspot._errors import SweetspotError
from sweetspot.engine.releases import (
    INTER_TOKEN_LATENCY_METRIC_SINCE,
    KV_CACHE_USAGE_METRIC_SINCE,
)

__all__ = [
    "Histogram",
    "MetricNames",
    "MetricsSnapshot",
    "ServerFacts",
    "ServerQuantiles",
    "compute_server_facts",
    "histogram_delta",
    "histogram_quantile",
    "histogram_quantiles",
    "metric_names",
    "parse_metrics",
]

# Current name first, then the name older vLLM releases used.
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
TPOT = ("vllm:request_time_per_output_token_seconds",)  # one per request (0.10.2 on)
E2EL = ("vllm:e2e_request_latency_seconds",)
QUEUE_TIME = ("vllm:request_queue_time_seconds",)
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class MetricNames:
    """What one vLLM release calls each series on /metrics: histograms and gauges by their
    family name, counters with the ``_total`` the exposition adds (as PromQL reads them)."""

    ttft: str  # histogram, seconds
    itl: str  # histogram of the gaps between streamed tokens, seconds
    tpot: str | None  # histogram of each request's time per output token; None: not exported
    e2el: str  # histogram, seconds
    queue_time: str  # histogram, seconds spent waiting before the first schedule
    kv_usage: str  # gauge, 0-1 per engine
    running: str = "vllm:num_requests_running"  # gauge
    waiting: str = "vllm:num_requests_waiting"  # gauge
    preemptions: str = "vllm:num_preemptions_total"  # counter
    prompt_tokens: str = "vllm:prompt_tokens_total"  # counter
    generation_tokens: str = "vllm:generation_tokens_total"  # counter
    requests_finished: str = "vllm:request_success_total"  # counter, by finished_reason
    release: str | None = None  # the release these names are for; None: the newest


def metric_names(vllm_version: str | None = None) -> MetricNames:
    """The /metrics names of ``vllm_version`` (None: the current names); an unparsable version
    is a ``SweetspotError``."""
    try:
        version = None if vllm_version is None else Version(vllm_version)
    except InvalidVersion:
        raise SweetspotError(f"not a vLLM version: {vllm_version!r}") from None
    current_latency = version is None or version >= INTER_TOKEN_LATENCY_METRIC_SINCE
    current_kv = version is None or version >= KV_CACHE_USAGE_METRIC_SINCE
    return MetricNames(
        ttft=TTFT[0],
        itl=ITL[0] if current_latency else ITL[1],
        tpot=TPOT[0] if current_latency else None,
        e2el=E2EL[0],
        queue_time=QUEUE_TIME[0],
        kv_usage=KV_USAGE[0] if current_kv else KV_USAGE[1],
        release=vllm_version,
    )


def _base(name: str) -> str:
    return name.removesuffix("_total")


@dataclass(frozen=True, slots=True)
class Histogram:
    """One histogram summed over label sets."""

    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending
    count: float  # observations (the +Inf bucket where ``_count`` is missing)
    sum: float  # sum of the observed values


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """One scrape of ``/metrics``, every metric summed over its label sets."""

    counters: Mapping[str, float] = field(default_factory=dict)  # by name without ``_total``
    gauges: Mapping[str, float] = field(default_factory=dict)  # summed over label sets
    gauge_peaks: Mapping[str, float] = field(default_factory=dict)  # largest label set's value
    histograms: Mapping[str, Histogram] = field(default_factory=dict)

    def counter(self, name: str) -> float | None:
        return self.counters.get(_base(name))

    def gauge(self, *names: str, peak: bool = False) -> float | None:
        """The first of ``names`` present (current name, then old ones)."""
        values = self.gauge_peaks if peak else self.gauges
        return next((values[n] for n in names if n in values), None)

    def histogram(self, *names: str) -> Histogram | None:
        return next((self.histograms[n] for n in names if n in self.histograms), None)


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition; anything else raises a one-line ``SweetspotError``."""
    # Imported here: the client library takes ~40 ms to import, and most commands (simulate
    # among them) never parse a server's metrics.
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, float] = defaultdict(float)
    gauges: dict[str, float] = defaultdict(float)
    peaks: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    parts: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # _count, _sum
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, value = sample.name, float(sample.value)
                if name.endswith("_created"):  # creation timestamps, not measurements
                    continue
                if family.type == "histogram" or (
                    name.endswith("_bucket") and "le" in sample.labels
                ):
                    base, _, suffix = name.rpartition("_")
                    if suffix == "bucket":
                        buckets[base][float(sample.labels["le"])] += value
                    else:
                        parts[base][suffix] += value
                elif family.type == "counter" or name.endswith("_total"):
                    counters[_base(name)] += value
                else:
                    gauges[name] += value
                    peaks[name] = max(peaks.get(name, -math.inf), value)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise SweetspotError(f"not Prometheus metrics text: {detail}") from None

    histograms = {}
    for base, by_bound in buckets.items():
        # An untyped exposition leaves _count and _sum among the gauges.
        count = parts[base].get("count", gauges.pop(f"{base}_count", None))
        total = parts[base].get("sum", gauges.pop(f"{base}_sum", 0.0))
        peaks.pop(f"{base}_count", None)
        peaks.pop(f"{base}_sum", None)
        ordered = tuple(sorted(by_bound.items()))
        if count is None:
            count = ordered[-1][1] if math.isinf(ordered[-1][0]) else 0.0
        histograms[base] = Histogram(buckets=ordered, count=count, sum=total)
    return MetricsSnapshot(
        counters=dict(counters), gauges=dict(gauges), gauge_peaks=peaks, histograms=histograms
    )


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile`` over (upper bound, cumulative count) pairs.

    The rank ``q × total`` falls in the first bucket whose cumulative count reaches it; the value
    is interpolated linearly between that bucket's bounds (the lowest bucket starts at 0). A rank in
    the +Inf bucket gives the highest finite bound. None where Prometheus gives NaN: no +Inf
    bucket, fewer than two buckets, or no observations.
    """
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    bounds = [b for b, _ in ordered]
    counts: list[float] = []
    for _, c in ordered:  # cumulative counts must not fall (Prometheus' ensureMonotonic)
        counts.append(max(c, counts[-1]) if counts else c)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next((i for i in range(len(ordered) - 1) if counts[i] >= rank), len(ordered) - 1)
    if b == len(ordered) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count <= 0:
        return start
    return start + (end - start) * (rank / count)


@dataclass(frozen=True, slots=True)
class ServerQuantiles:
    """Quantiles of one server histogram over the run window, in seconds."""

    p50_s: float
    p90_s: float
    p99_s: float
    count: int  # observations in the window


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What vLLM counted between two scrapes; None where the server does not export it."""

    preemptions: int | None
    prefix_cache_hit_rate: float | None  # hit tokens / queried tokens, 0–1
    prompt_tokens: int | None
    generation_tokens: int | None
    requests_succeeded: int | None
    spec_acceptance_rate: float | None  # accepted / draft tokens, 0–1 (vLLM prints it × 100)
    spec_acceptance_length: float | None  # 1 + accepted tokens / drafts
    peak_kv_cache_usage: float | None  # 0–1, fullest engine, over the samples and after
    max_requests_waiting: int | None  # over the samples, summed over engines
    max_requests_running: int | None
    ttft: ServerQuantiles | None
    itl: ServerQuantiles | None  # inter-token latency (time per output token on old vLLM)
    e2el: ServerQuantiles | None
    queue_time: ServerQuantiles | None


def compute_server_facts(
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    samples: Iterable[MetricsSnapshot] = (),
) -> ServerFacts:
    """Facts about the run between ``before`` and ``after``; ``samples`` were taken in between."""
    samples = list(samples)

    def delta(name: str) -> float | None:
        a, b = before.counter(name), after.counter(name)
        return None if a is None or b is None or b < a else b - a

    def count(name: str) -> int | None:
        d = delta(name)
        return None if d is None else round(d)

    hits, queries = delta("vllm:prefix_cache_hits"), delta("vllm:prefix_cache_queries")
    drafts = delta("vllm:spec_decode_num_drafts")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens")
    accepted = delta("vllm:spec_decode_num_accepted_tokens")
    return ServerFacts(
        preemptions=count("vllm:num_preemptions"),
        prefix_cache_hit_rate=_ratio(hits, queries),
        prompt_tokens=count("vllm:prompt_tokens"),
        generation_tokens=count("vllm:generation_tokens"),
        requests_succeeded=count("vllm:request_success"),
        spec_acceptance_rate=_ratio(accepted, draft_tokens),
        spec_acceptance_length=(
            None if accepted is None or not drafts else 1 + accepted / drafts
        ),
        peak_kv_cache_usage=_peak([*samples, after], KV_USAGE, peak=True),
        max_requests_waiting=_int(_peak(samples, ("vllm:num_requests_waiting",))),
        max_requests_running=_int(_peak(samples, ("vllm:num_requests_running",))),
        ttft=_window_quantiles(before, after, TTFT),
        itl=_window_quantiles(before, after, ITL),
        e2el=_window_quantiles(before, after, E2EL),
        queue_time=_window_quantiles(before, after, QUEUE_TIME),
    )


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def _peak(
    snapshots: Sequence[MetricsSnapshot], names: Sequence[str], *, peak: bool = False
) -> float | None:
    values = [v for s in snapshots if (v := s.gauge(*names, peak=peak)) is not None]
    return max(values, default=None)


def histogram_delta(before: MetricsSnapshot, after: MetricsSnapshot,
                    names: Sequence[str]) -> Histogram | None:
    """The observations ``after`` holds beyond ``before`` under the first of ``names`` it
    exports (one missing from ``before`` counts from zero); None: not exported, or its counts
    fell (the server restarted in between)."""
    name = next((n for n in names if n in after.histograms), None)
    if name is None:
        return None
    new = after.histograms[name]
    old = before.histograms.get(name, Histogram(buckets=(), count=0.0, sum=0.0))
    earlier = dict(old.buckets)
    buckets = tuple((le, c - earlier.get(le, 0.0)) for le, c in new.buckets)
    if any(c < 0 for _, c in buckets) or new.count < old.count:
        return None
    return Histogram(buckets=buckets, count=new.count - old.count, sum=new.sum - old.sum)


def histogram_quantiles(delta: Histogram | None) -> ServerQuantiles | None:
    """P50/P90/P99 of a histogram's observations (None: none, or no +Inf bucket)."""
    if delta is None or delta.count < 1:
        return None
    p50, p90, p99 = (histogram_quantile(q, delta.buckets) for q in QUANTILES)
    if p50 is None or p90 is None or p99 is None:
        return None
    return ServerQuantiles(p50_s=p50, p90_s=p90, p99_s=p99, count=round(delta.count))


def _window_quantiles(
    before: MetricsSnapshot, after: MetricsSnapshot, names: Sequence[str]
) -> ServerQuantiles | None:
    """Quantiles of the observations made between the two scrapes (bucket-count deltas)."""
    # Both scrapes must use the same name: a server cannot switch names mid-run.
    name = next((n for n in names if n in after.histograms), None)
    if name is None or name not in before.histograms:
        return None
    return histogram_quantiles(histogram_delta(before, after, (name,)))
