"""One configuration, evaluated: a trial on the backend, summarised as one row of the study.

A trial runs two workloads on the same server: the *capacity* run (the workload's lengths, all
requests at once) says how much the configuration can serve — its output throughput is the
throughput every goal speaks of — and the *traffic* run (the workload as given: its arrival rate)
says what latency users would see; SLOs are checked on it. A workload without a rate has one
run, which is both. Latency at saturation is queueing, and throughput at a rate below capacity
is the rate: neither alone answers both questions.

A row is plain JSON (the study store keeps it, the report reads it); its ``metrics`` use
``vllm bench serve``'s keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.trial import Trial
from sweetspot.metrics.run import bunched_streams, measure
from sweetspot.metrics.slo import parse_slos as _parse_slos
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.requests import Request, sample_requests
from sweetspot.spec.workload import ArrivalSpec, WorkloadSpec

__all__ = ["LATENCY_KEYS", "Backend", "Evaluator", "config_to_json", "parse_slos"]

STATS = ("mean", "median", "p90", "p95", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
LATENCY_KEYS = tuple(f"{s}_{m}_ms" for m in LATENCIES for s in STATS)
THROUGHPUT_KEYS = ("output_throughput", "request_throughput", "total_token_throughput")


class Backend(Protocol):
    """Where trials run: the simulator, real vLLM servers (``backends.vllm``), a test fake."""

    name: str

    def run(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig, *,
            more: Sequence[tuple[Sequence[Request], LoadConfig]] = ()) -> Trial: ...


def parse_slos(text: str | None) -> dict[str, float]:
    """``p99_ttft=300ms,p99_tpot=50ms,median_e2el=2s`` -> {"p99_ttft_ms": 300.0, ...}; a bare
    metric (``ttft=300ms``, or vLLM's ``ttft:300``) means its P99 (``metrics.slo``)."""
    return _parse_slos(text, stats=STATS).limits_ms


def config_to_json(config: ServingConfig) -> dict[str, Any]:
    return {k: (v.to_dict() if isinstance(v, SpeculativeConfig) else v)
            for k, v in config.explicit().items()}


@dataclass
class Evaluator:
    """Runs configurations on ``backend`` with one workload; every call draws the same
    requests (``seed``) unless a repeat asks for others."""

    backend: Backend
    workload: WorkloadSpec
    num_requests: int
    slos: Mapping[str, float]
    vocab_size: int
    seed: int = 0
    max_concurrency: int | None = None
    realtime_client: bool = False  # measured backends: the load generator runs SCHED_FIFO

    def __post_init__(self) -> None:
        self._cache: dict[int, tuple] = {}

    def _runs(self, seed: int):
        if seed not in self._cache:
            wl = self.workload
            capacity = dataclasses.replace(wl, arrival=ArrivalSpec(process="inf"))
            load = LoadConfig(base_url="", model="", max_concurrency=self.max_concurrency,
                              realtime=self.realtime_client)
            first = sample_requests(capacity, self.num_requests, seed=seed,
                                    vocab_size=self.vocab_size)
            more = []
            if wl.arrival.process not in ("inf", "closed"):
                more.append((sample_requests(wl, self.num_requests, seed=seed + 7919,
                                             vocab_size=self.vocab_size), load))
            self._cache[seed] = (first, load, tuple(more))
        return self._cache[seed]

    def evaluate(self, config: ServingConfig, *, repeat: int = 0) -> tuple[dict, Trial]:
        """Row (without number/phase) and the trial itself."""
        first, load, more = self._runs(self.seed + 1000 * repeat)
        trial = self.backend.run(config, first, load, more=more)
        return self.row(config, trial), trial

    def probe_rates(self, config: ServingConfig, rates: Sequence[float], *,
                    repeat: int = 0) -> list[dict]:
        """One trial of ``config`` (one server) running the workload at each rate in turn, the
        workload's own arrival process (Poisson where it has none: rate inf, closed loops,
        traces); per rate: whether every SLO held, what was missed, the latencies."""
        load = LoadConfig(base_url="", model="", max_concurrency=self.max_concurrency,
                              realtime=self.realtime_client)
        arrival = self.workload.arrival
        runs = []
        for i, rate in enumerate(rates):
            at = (dataclasses.replace(arrival, rate=rate)
                  if arrival.process in ("poisson", "gamma", "constant")
                  else ArrivalSpec(process="poisson", rate=rate))
            wl = dataclasses.replace(self.workload, arrival=at)
            runs.append(sample_requests(wl, self.num_requests,
                                        seed=self.seed + 104_729 * repeat + 31 * i,
                                        vocab_size=self.vocab_size))
        trial = self.backend.run(config, runs[0], load,
                                 more=[(requests, load) for requests in runs[1:]])
        done = ([trial.run, *trial.more_runs] if trial.run is not None else [])
        probes = []
        for i, rate in enumerate(rates):
            probe: dict[str, Any] = {"rate": rate, "status": trial.status, "cause": trial.cause}
            if i < len(done):
                result = measure(done[i]).result.to_dict()
                metrics = {k: result[k] for k in (*LATENCY_KEYS, "request_throughput",
                                                  "failed") if k in result}
                missed = [k for k, limit in self.slos.items()
                          if k not in metrics or metrics[k] > limit]
                failed = bool(metrics.get("failed"))
                probe.update(metrics=metrics, missed=missed, ok=not missed and not failed)
                if not failed:
                    probe.update(status="ok", cause=None)
                elif trial.ok:
                    probe.update(status="failed", cause=f"{metrics['failed']} requests failed")
            else:  # the server failed before this rate ran
                probe.update(metrics={}, missed=[], ok=False,
                             status=trial.status if trial.status != "ok" else "crash")
            probes.append(probe)
        return probes

    def row(self, config: ServingConfig, trial: Trial) -> dict:
        metrics: dict[str, Any] = {}
        facts = dict(trial.facts)
        failed = None
        if trial.ok and trial.run is not None:
            capacity = measure(trial.run)
            traffic = measure(trial.more_runs[0]) if trial.more_runs else capacity
            cap, lat = capacity.result.to_dict(), traffic.result.to_dict()
            metrics = {k: cap[k] for k in THROUGHPUT_KEYS}
            metrics.update({k: lat[k] for k in LATENCY_KEYS if k in lat})
            metrics["traffic_request_throughput"] = lat["request_throughput"]
            failed = cap["failed"] + lat["failed"] if traffic is not capacity else cap["failed"]
            metrics["failed"] = failed
            # Measured runs only: a simulated client is never starved, and a simulated
            # overload (stalls of preempted requests lift the mean TPOT) would read as bursts.
            if self.backend.name != "sim" and any(
                    bunched_streams(m.to_dict()) for m in (capacity, traffic)):
                facts["bunched_streams"] = True  # latencies of the client's scheduling
            for m in (capacity, traffic):
                if m.server is not None:
                    facts.setdefault("preemptions", m.server.preemptions)
                    facts.setdefault("peak_kv_usage", m.server.peak_kv_cache_usage)
        missed = [key for key, limit in self.slos.items()
                  if key not in metrics or metrics[key] > limit]
        memory = trial.memory
        memory_bytes = None
        if memory is not None:
            memory_bytes = memory.device_bytes if memory.device_bytes is not None \
                else memory.host_rss_bytes
        return {
            "config": config_to_json(config),
            "status": trial.status,
            "cause": trial.cause,
            "metrics": metrics,
            "memory_bytes": memory_bytes,
            "kv_cache_tokens": trial.startup.kv_cache_tokens if trial.startup else None,
            "slo_ok": trial.ok and not missed and not failed,
            "slo_missed": missed,
            "facts": {k: v for k, v in facts.items() if v is not None},
            "seconds": round(trial.timings.total_s, 3),
        }
