"""One measured run, summarised: the client-side result and what the server counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sweetspot._errors import SweetspotError
from sweetspot.backends.records import RequestRecord
from sweetspot.metrics.serve import BenchResult, compute_result

if TYPE_CHECKING:  # a simulated run's path needs neither (the server's /metrics are real-only)
    from sweetspot.backends.base import Run
    from sweetspot.metrics.prometheus import ServerFacts

__all__ = ["BUNCHED_SHARE", "BURST_GAP_S", "Measurement", "bunched_streams", "measure"]


# Bunched streams. vLLM sends a stream one message per engine step, and a step takes a
# millisecond or more (the shortest seen: ~1.2 ms, a 2-layer model at batch 1 on the CPU build),
# so two messages of one stream that reach the client under BURST_GAP_S apart did not arrive as
# they were sent: they waited -- in the client's socket while it was not scheduled, or in the API
# server's queue -- and were read in one go, microseconds apart. A starved client reads a whole
# answer at once; its TTFT then includes the decode and its TPOT reads near 0. Slow steps do not
# look like this: a decode step stalled behind a long prefill makes one long gap, never a short
# one. Each stream's first gap is left out: vLLM's chat stream sends the role message and the
# first text back to back. From BUNCHED_SHARE of the gaps on, the run's latencies are the
# machine's scheduling: a tenth of its decode arrived in bursts (starved runs on a 2-core VM
# read 19-43 of 48 answers whole, benchmarks/RESULTS.md 2026-12-03), while a client that is
# merely busy reads two messages at once now and then.
BURST_GAP_S = 0.5e-3
BUNCHED_SHARE = 0.10


@dataclass(frozen=True, slots=True)
class Measurement:
    result: BenchResult
    server: ServerFacts | None  # None when the server exports no /metrics
    errors: tuple[tuple[str, int], ...]  # distinct failure causes with their counts
    # Share of gaps between a stream's messages (after its first) under BURST_GAP_S; None
    # where no client received the streams (the simulator's exact token times).
    bunched_itl_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """vLLM's result keys at the top level (comparable with ``vllm bench serve``'s JSON),
        sweetspot's additions after them."""
        return {**self.result.to_dict(),
                "bunched_itl_share": self.bunched_itl_share,
                "server": asdict(self.server) if self.server else None,
                "errors": dict(self.errors)}


def measure(run: Run, *, percentiles: Sequence[float] = (50, 90, 95, 99),
            slos: Mapping[str, float] | None = None) -> Measurement:
    result = compute_result(run.records, duration_s=run.duration_s, percentiles=percentiles,
                            slos=slos)
    server = None
    if run.metrics_before is not None and run.metrics_after is not None:
        try:
            from sweetspot.metrics.prometheus import compute_server_facts, parse_metrics

            server = compute_server_facts(parse_metrics(run.metrics_before),
                                          parse_metrics(run.metrics_after),
                                          [parse_metrics(t) for t in run.metrics_samples])
        except SweetspotError:
            server = None  # a /metrics that is not Prometheus text: no server facts
    counts: dict[str, int] = {}
    for record in run.records:
        if record.error is not None:
            counts[record.error] = counts.get(record.error, 0) + 1
    share = _bunched_share(run.records) if run.processes > 0 else None
    return Measurement(result, server, tuple(sorted(counts.items(), key=lambda kv: -kv[1])),
                       share)


def _bunched_share(records: Sequence[RequestRecord]) -> float:
    short = total = 0
    for record in records:
        if record.ok:
            gaps = record.itls_s[1:]
            total += len(gaps)
            short += sum(gap < BURST_GAP_S for gap in gaps)
    return short / total if total else 0.0


def bunched_streams(data: Mapping[str, Any]) -> bool:
    """Whether a run's streams reached the client in bursts rather than step by step (see
    BURST_GAP_S): a client or API server starved of CPU (seen on 2-core machines running the
    CPU build beside its client). Then TTFT, TPOT and ITL measure the machine's scheduler; the
    run's duration, and so its throughput, are still right -- except in a closed loop, whose
    next request waited for the late chunks. ``data``: ``Measurement.to_dict()`` or a bench
    JSON; one without the share (the simulator, older files) is not judged."""
    share = data.get("bunched_itl_share")
    return isinstance(share, int | float) and share >= BUNCHED_SHARE
