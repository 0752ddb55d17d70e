"""The serving result of a run, key for key as ``vllm bench serve`` (0.32) reports it.

Definitions, mirrored from vLLM's ``calculate_metrics`` and its streaming request functions:

- A request *succeeded* when it has no error, an end time and at least one chunk (vLLM fails a
  stream that never carried ``choices``). Failed requests are counted in ``failed`` and left out of
  every latency statistic, token total and peak.
- TTFT = first chunk − send; E2EL = end − send; ITL = gaps between consecutive chunks, per chunk
  not per token, pooled over requests in record order; TPOT = (E2EL − TTFT) / (output_tokens − 1),
  only for outputs of more than one token.
- output_tokens is ``usage.completion_tokens``; where it is 0 vLLM re-tokenises the generated text,
  which the records do not keep, so the chunk count stands in.
- Statistics: ``np.mean``, ``np.median``, ``np.std`` (ddof 0), ``np.percentile`` (linear); an empty
  list is summarised as the scalar 0, as vLLM's ``values or 0`` does.
- Throughputs divide by the duration (0 when the duration is 0). Goodput counts the successful
  requests whose value is ≤ every SLO given (ms); a one-token output counts TPOT 0.
- ``max_output_tokens_per_s``: the most chunks (vLLM counts chunks, not tokens) in any one-second
  bucket counted from the earliest successful send; ``max_concurrent_requests``: the most successful
  requests active in any such bucket (a request is active from its send's bucket to its end's).
- sweetspot's extras: client lag (actual − scheduled send, less any wait for a concurrency
  slot; all records) and the SLOs used.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweetspot._errors import SweetspotError
from sweetspot.backends.records import RequestRecord
from sweetspot.metrics.chunks import Chunks
from sweetspot.metrics.sample import Sample

__all__ = [
    "LATENCY_NAMES",
    "SLO_NAMES",
    "BenchResult",
    "LatencyStats",
    "compute_result",
    "percentile_word",
]

LATENCY_NAMES = ("ttft", "tpot", "itl", "e2el")  # vLLM's order in its result JSON
SLO_NAMES = ("ttft", "tpot", "e2el")  # what ``--goodput`` accepts, values in ms
_MS_PER_S = 1000  # vLLM's MILLISECONDS_TO_SECONDS_CONVERSION


def percentile_word(p: float) -> str:
    """How vLLM names a percentile in a key: 99.0 → ``99``, 99.9 → ``99.9``."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """One latency's summary in milliseconds, as vLLM computes and reports it."""

    mean_ms: float
    median_ms: float
    std_ms: float
    percentiles_ms: tuple[tuple[float, float], ...]  # (percentile, value), in the order asked

    @classmethod
    def of(cls, values_s: np.ndarray | Sample, percentiles: Sequence[float]) -> LatencyStats:
        """The summary of ``values_s`` (seconds; a ``Sample`` counts each value its times).
        A ``Sample`` may be reordered in place."""
        sample = values_s if isinstance(values_s, Sample) else Sample(np.array(values_s))
        if not sample.size:  # vLLM summarises `values or 0`: an empty list becomes the scalar 0
            sample = Sample(np.zeros(1))
        mean, std = sample.mean_std()
        pcts = sample.quantiles(percentiles) if percentiles else ()
        return cls(
            mean_ms=float(mean * _MS_PER_S),
            median_ms=float(sample.median() * _MS_PER_S),
            std_ms=float(std * _MS_PER_S),
            percentiles_ms=tuple((p, float(v * _MS_PER_S))
                                 for p, v in zip(percentiles, pcts, strict=True)),
        )


@dataclass(frozen=True, slots=True)
class BenchResult:
    """What ``vllm bench serve`` prints for a run, plus sweetspot's client-lag extras.

    Latency summaries stay in milliseconds, as vLLM's own ``BenchmarkMetrics`` keeps them, so the
    JSON form loads back to an equal object (seconds × 1000 ÷ 1000 does not round-trip exactly).
    """

    duration_s: float  # first send to last response end (key "duration")
    completed: int  # successful requests
    failed: int
    total_input_tokens: int  # prompt tokens of successful requests
    total_output_tokens: int  # output tokens of successful requests
    request_throughput: float  # completed requests per second
    request_goodput: float | None  # requests meeting every SLO per second; None without SLOs
    output_throughput: float  # output tokens per second
    total_token_throughput: float  # input + output tokens per second
    max_output_tokens_per_s: float  # busiest one-second bucket, in chunks as vLLM counts
    max_concurrent_requests: int  # busiest one-second bucket, in active requests
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    mean_client_lag_ms: float  # RequestRecord.client_lag_s over all records
    p99_client_lag_ms: float
    max_client_lag_ms: float
    slos_ms: tuple[tuple[str, float], ...] = ()  # goodput SLOs used, in SLO_NAMES order

    @property
    def percentiles(self) -> tuple[float, ...]:
        return tuple(p for p, _ in self.ttft.percentiles_ms)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: vLLM's result keys (minus its per-request arrays), then the extras."""
        d: dict[str, Any] = {
            "duration": self.duration_s,
            "completed": self.completed,
            "failed": self.failed,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.max_concurrent_requests,
        }
        for name in LATENCY_NAMES:
            stats: LatencyStats = getattr(self, name)
            d[f"mean_{name}_ms"] = stats.mean_ms
            d[f"median_{name}_ms"] = stats.median_ms
            d[f"std_{name}_ms"] = stats.std_ms
            for p, value in stats.percentiles_ms:
                d[f"p{percentile_word(p)}_{name}_ms"] = value
        d["mean_client_lag_ms"] = self.mean_client_lag_ms
        d["p99_client_lag_ms"] = self.p99_client_lag_ms
        d["max_client_lag_ms"] = self.max_client_lag_ms
        d["goodput_slos_ms"] = dict(self.slos_ms)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        """Load ``to_dict``'s form (e.g. read back from JSON)."""
        try:
            stats = {name: _stats_from_dict(d, name) for name in LATENCY_NAMES}
            goodput = d["request_goodput"]
            return cls(
                duration_s=float(d["duration"]),
                completed=int(d["completed"]),
                failed=int(d["failed"]),
                total_input_tokens=int(d["total_input_tokens"]),
                total_output_tokens=int(d["total_output_tokens"]),
                request_throughput=float(d["request_throughput"]),
                request_goodput=None if goodput is None else float(goodput),
                output_throughput=float(d["output_throughput"]),
                total_token_throughput=float(d["total_token_throughput"]),
                max_output_tokens_per_s=float(d["max_output_tokens_per_s"]),
                max_concurrent_requests=int(d["max_concurrent_requests"]),
                **stats,
                mean_client_lag_ms=float(d["mean_client_lag_ms"]),
                p99_client_lag_ms=float(d["p99_client_lag_ms"]),
                max_client_lag_ms=float(d["max_client_lag_ms"]),
                slos_ms=_check_slos(d.get("goodput_slos_ms")),
            )
        except KeyError as exc:
            raise SweetspotError(f"benchmark result lacks the key {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise SweetspotError(f"benchmark result has a malformed value: {exc}") from None


def _stats_from_dict(d: Mapping[str, Any], name: str) -> LatencyStats:
    key = re.compile(rf"p(\d+(?:\.\d+)?)_{name}_ms")
    percentiles = tuple(
        (float(m.group(1)), float(v)) for k, v in d.items() if (m := key.fullmatch(k))
    )
    return LatencyStats(
        mean_ms=float(d[f"mean_{name}_ms"]),
        median_ms=float(d[f"median_{name}_ms"]),
        std_ms=float(d[f"std_{name}_ms"]),
        percentiles_ms=percentiles,
    )


def compute_result(
    records: Iterable[RequestRecord],
    *,
    duration_s: float | None = None,
    percentiles: Sequence[float] = (50, 90, 95, 99),
    slos: Mapping[str, float] | None = None,
) -> BenchResult:
    """Summarise a run's records as ``vllm bench serve`` would (see the module docstring).

    ``duration_s`` defaults to the latest end, last chunk or send of any record, the run having
    started at 0; the load generator passes the duration it measured. ``slos`` maps ``ttft``,
    ``tpot`` and ``e2el`` to limits in milliseconds, as ``--goodput``.
    """
    records = list(records)
    slos_ms = _check_slos(slos)
    qs = _check_percentiles(percentiles)
    if duration_s is None:
        duration_s = _default_duration_s(records)
    elif not (math.isfinite(duration_s) and duration_s >= 0):
        raise SweetspotError(f"duration must be a finite number of seconds ≥ 0, not {duration_s}")

    ok = [r for r in records if r.ok and r.chunk_times_s]
    n_ok = len(ok)
    t = _Timings.of(ok)
    goodput = None
    if slos_ms:
        goodput = _rate(_count_good(t, slos_ms), duration_s)
    total_input, total_output = int(t.prompt_tokens.sum()), int(t.output_tokens.sum())
    peak_chunks, peak_requests = t.peak_chunks, t.peak_requests
    lag = np.fromiter((r.client_lag_s for r in records), float, len(records))
    lag_or_0: Any = lag if lag.size else 0
    return BenchResult(
        duration_s=float(duration_s),
        completed=n_ok,
        failed=len(records) - n_ok,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        request_throughput=_rate(n_ok, duration_s),
        request_goodput=goodput,
        output_throughput=_rate(total_output, duration_s),
        total_token_throughput=_rate(total_input + total_output, duration_s),
        max_output_tokens_per_s=peak_chunks,
        max_concurrent_requests=peak_requests,
        ttft=LatencyStats.of(t.ttft_s, qs),
        tpot=LatencyStats.of(t.tpot_s, qs),
        itl=LatencyStats.of(t.itl_s, qs),
        e2el=LatencyStats.of(t.e2el_s, qs),
        mean_client_lag_ms=float(np.mean(lag_or_0) * _MS_PER_S),
        p99_client_lag_ms=float(Sample(np.array(lag_or_0, ndmin=1)).quantiles([99])[0]
                                * _MS_PER_S),
        max_client_lag_ms=float(np.max(lag_or_0) * _MS_PER_S),
        slos_ms=slos_ms,
    )


@dataclass(frozen=True, slots=True)
class _Timings:
    """The successful requests' numbers as arrays, one entry per request in record order
    unless said otherwise; seconds and tokens."""

    sent_s: np.ndarray
    ttft_s: np.ndarray
    e2el_s: np.ndarray
    tpot_s: np.ndarray  # outputs of more than one token only
    tpot_or_0_s: np.ndarray  # every request, 0 for a one-token output (as goodput counts it)
    itl_s: Sample  # every gap between consecutive chunks of a request
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    peak_chunks: float  # most chunks in one second (``_peaks``)
    peak_requests: int  # most requests in flight in one second

    @classmethod
    def of(cls, ok: Sequence[RequestRecord]) -> _Timings:
        n_ok = len(ok)
        sent = np.fromiter((r.sent_s for r in ok), float, n_ok)
        end = np.fromiter((r.end_s for r in ok), float, n_ok)
        prompt = np.fromiter((r.prompt_tokens for r in ok), np.int64, n_ok)
        reported = np.fromiter((r.output_tokens for r in ok), np.int64, n_ok)
        chunks = Chunks.of([r.chunk_times_s for r in ok])
        output = np.where(reported > 0, reported, chunks.per_request)  # vLLM: recount if 0
        ttft = chunks.first - sent
        e2el = end - sent
        peak_chunks, peak_requests = _peaks(sent, sent + e2el, chunks.times)
        multi = output > 1
        tpot = (e2el[multi] - ttft[multi]) / (output[multi] - 1)
        tpot_all = np.zeros(n_ok)  # one-token outputs count TPOT 0 for goodput
        tpot_all[multi] = tpot
        return cls(sent_s=sent, ttft_s=ttft, e2el_s=e2el, tpot_s=tpot, tpot_or_0_s=tpot_all,
                   itl_s=chunks.gaps, prompt_tokens=prompt, output_tokens=output,
                   peak_chunks=peak_chunks, peak_requests=peak_requests)


def _count_good(t: _Timings, slos_ms: Sequence[tuple[str, float]]) -> int:
    """Successful requests whose value is within every SLO."""
    per_request = {"ttft": t.ttft_s, "tpot": t.tpot_or_0_s, "e2el": t.e2el_s}
    good = np.ones(t.sent_s.size, dtype=bool)
    for name, limit_ms in slos_ms:
        good &= limit_ms / _MS_PER_S >= per_request[name]
    return int(good.sum())


def _rate(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0




def _peaks(sent: np.ndarray, ends: np.ndarray, chunks: Sample) -> tuple[float, int]:
    """vLLM's per-second buckets from the earliest successful send: (most chunks, most requests).

    Bucket indices truncate toward zero, as vLLM's ``int()``; a request occupies every bucket from
    its send's to its end's, counted here with a difference array instead of a loop.
    """
    if sent.size == 0:
        return 0.0, 0
    t0 = sent.min()
    n_buckets = int(np.ceil(ends.max() - t0)) + 1
    bucket = (chunks.values - t0).astype(np.int64)
    inside = (bucket >= 0) & (bucket < n_buckets)  # chunks outside the window are not counted
    weights = None if chunks.counts is None else chunks.counts[inside]
    per_bucket = np.bincount(bucket[inside], weights=weights, minlength=n_buckets)
    opened = np.bincount((sent - t0).astype(np.int64), minlength=n_buckets + 1)
    closed = np.bincount((ends - t0).astype(np.int64) + 1, minlength=n_buckets + 1)
    active = np.cumsum(opened - closed)[:n_buckets]
    return float(per_bucket.max()), int(active.max())


def _default_duration_s(records: Sequence[RequestRecord]) -> float:
    latest = 0.0  # the run starts at 0, just before the first send
    for r in records:
        latest = max(latest, r.sent_s, r.end_s if r.end_s is not None else r.sent_s)
        if r.chunk_times_s:
            latest = max(latest, r.chunk_times_s[-1])
    return latest


def _check_slos(slos: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    if not slos:
        return ()
    if unknown := sorted(set(slos) - set(SLO_NAMES)):
        plural = "s" if len(unknown) > 1 else ""
        raise SweetspotError(
            f"unknown SLO{plural} {', '.join(map(repr, unknown))}: use ttft, tpot or e2el (ms)"
        )
    checked = []
    for name in SLO_NAMES:
        if name not in slos:
            continue
        try:
            limit_ms = float(slos[name])
        except (TypeError, ValueError):
            raise SweetspotError(f"SLO {name} must be a number of ms, not {slos[name]!r}") from None
        if not limit_ms >= 0:
            raise SweetspotError(f"SLO {name} must be ≥ 0 ms, not {limit_ms:g}")
        checked.append((name, limit_ms))
    return tuple(checked)


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    checked: list[float] = []
    for p in percentiles:
        if not (isinstance(p, numbers.Real) and 0 <= p <= 100):
            raise SweetspotError(f"percentiles must be numbers from 0 to 100, not {p!r}")
        if float(p) not in checked:
            checked.append(float(p))
    return tuple(checked)
