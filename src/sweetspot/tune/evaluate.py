"""One configuration, evaluated: a trial on the backend, summarised as one row of the study.

A trial runs two workloads on the same server: the *capacity* run (the workload's lengths in a
closed loop with twice the configuration's batch in flight, eight batches long, 24 on a real
server) says how much the configuration can serve — its steady-state output rate
(``metrics.capacity``: ramp-up and drain excluded) is the throughput every goal speaks of — and
the *traffic* run (the workload at the offered rate) says what latency users would see; SLOs are
checked on it. A configuration whose capacity falls short of the offered rate by more than the
resolution is *over capacity*: its queue grows for as long as the traffic lasts, so its
latencies measure the run's length and are neither checked nor compared. One short by less is
not flagged (its latencies stand), but no pick is made of it. A workload without a rate has one
run, which is both.

The row is a ``tune.result.TrialResult``; its ``metrics`` use ``vllm bench serve``'s keys;
measured trials also keep every run's bench-shaped result (``runs``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sweetspot.backends.base import Backend, Trial, run_in_order
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.metrics.capacity import SteadyState, steady_state
from sweetspot.metrics.run import bunched_streams, measure
from sweetspot.metrics.slo import parse_slos as _parse_slos
from sweetspot.spec.knobs import ServingConfig, SpeculativeConfig
from sweetspot.spec.requests import Request, sample_requests
from sweetspot.spec.workload import ArrivalSpec, WorkloadSpec
from sweetspot.tune.picks import RESOLUTION
from sweetspot.tune.result import TrialResult

__all__ = ["LATENCY_KEYS", "Evaluator", "config_to_json", "parse_slos",
           "traffic_workload"]

STATS = ("mean", "median", "p90", "p95", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
LATENCY_KEYS = tuple(f"{s}_{m}_ms" for m in LATENCIES for s in STATS)
THROUGHPUT_KEYS = ("output_throughput", "request_throughput", "total_token_throughput")


def parse_slos(text: str | None) -> dict[str, float]:
    """``p99_ttft=300ms,p99_tpot=50ms,median_e2el=2s`` -> {"p99_ttft_ms": 300.0, ...}; a bare
    metric (``ttft=300ms``, or vLLM's ``ttft:300``) means its P99 (``metrics.slo``)."""
    return _parse_slos(text, stats=STATS).limits_ms


def config_to_json(config: ServingConfig) -> dict[str, Any]:
    return {k: (v.to_dict() if isinstance(v, SpeculativeConfig) else v)
            for k, v in config.explicit().items()}


# The capacity run is a closed loop holding IN_FLIGHT_PER_BATCH batches in flight (the batch
# estimated from max-num-seqs and the KV cache), CAPACITY_TURNOVERS batches long, so its
# saturated window is long against ramp-up and drain; at most MAX_CAPACITY_REQUESTS requests.
# A closed loop, not a burst: on a real server new requests keep arriving while it serves, and
# that front-end work slows the engine (on the H200 a burst read 27-56 % above a closed loop of
# the same server, whose own counters agreed with the loop: benchmarks/RESULTS.md).
# A real server runs three times as many turnovers: on the H200 (2026-12-06) eight turnovers
# of a 128-sequence server lasted 10 s and read 4,546 to 7,489 tok/s on three fresh servers of
# one configuration, while the engine-limited trials that ran 60 s or more agreed with the
# engine's own counters within 2.3 %. The simulator's figure is stable at eight (doubling the
# run moves it 2.1 % at most over the default space: tests/tune/test_capacity_runs.py).
CAPACITY_TURNOVERS = 8
MEASURED_TURNOVERS = 24
IN_FLIGHT_PER_BATCH = 2
MAX_CAPACITY_REQUESTS = 6144
MAX_MEASURED_REQUESTS = 8192
# At least enough requests that the draw's mean output length is within this (one standard
# error): the token rate moves with it (a 512-request draw of chat's lengths moved it by 4 %).
DRAW_PRECISION = 0.025
TRAFFIC_SEED_OFFSET = 7919  # the traffic run's requests: another draw than the capacity run's


def traffic_workload(workload: WorkloadSpec, rate: float) -> WorkloadSpec:
    """``workload`` offered at ``rate`` req/s: its own arrival process where it has one with a
    rate, Poisson otherwise (rate inf, closed loops, traces)."""
    arrival = workload.arrival
    at = (dataclasses.replace(arrival, rate=rate)
          if arrival.process in ("poisson", "gamma", "constant")
          else ArrivalSpec(process="poisson", rate=rate))
    return dataclasses.replace(workload, arrival=at)


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
    headers: tuple[tuple[str, str], ...] = ()  # with every request (an endpoint's API key)
    rate: float | None = None  # offered req/s of the traffic run; None: the workload's own
    # Requests a configuration runs at once, from its settings and the capacity run's requests
    # (sizes the capacity run); None: the capacity run has ``num_requests``.
    batch_estimate: Callable[[ServingConfig, Sequence[Request]], int] | None = None

    def __post_init__(self) -> None:
        self._cache: dict[tuple, tuple] = {}
        self._prepared: dict[tuple, tuple[TrialResult, Trial]] = {}  # evaluations already run

    @property
    def offered_rate(self) -> float | None:
        """The traffic's request rate, None when the workload has none (rate inf, closed)."""
        if self.rate is not None:
            return self.rate
        arrival = self.workload.arrival
        return arrival.rate if arrival.process not in ("inf", "closed", "trace") else None

    @property
    def measured(self) -> bool:
        return self.backend.measured

    def _load(self) -> LoadConfig:
        return LoadConfig(base_url="", model="", max_concurrency=self.max_concurrency,
                          realtime=self.realtime_client, headers=self.headers)

    def capacity_plan(self, config: ServingConfig, seed: int
                      ) -> tuple[list[Request], int | None]:
        """The capacity run: the workload's lengths in a closed loop that keeps twice the
        configuration's estimated batch in flight (so the batch stays full and requests queue
        behind it even where the estimate is low), ``CAPACITY_TURNOVERS`` batches long
        (``MEASURED_TURNOVERS`` on a real server); and
        that in-flight count (None without an estimate: every request at once)."""
        wl = dataclasses.replace(self.workload, arrival=ArrivalSpec(process="inf"))
        pilot = sample_requests(wl, self.num_requests, seed=seed, vocab_size=self.vocab_size)
        if self.batch_estimate is None:
            return pilot, None
        batch = max(1, self.batch_estimate(config, pilot))
        turnovers, most = ((MEASURED_TURNOVERS, MAX_MEASURED_REQUESTS) if self.measured
                           else (CAPACITY_TURNOVERS, MAX_CAPACITY_REQUESTS))
        wanted = min(most, max(_draw_floor(pilot), turnovers * batch))
        requests = pilot if wanted <= len(pilot) else sample_requests(
            wl, wanted, seed=seed, vocab_size=self.vocab_size)
        return requests, min(len(requests), IN_FLIGHT_PER_BATCH * batch)

    def capacity_requests(self, config: ServingConfig, seed: int) -> list[Request]:
        return self.capacity_plan(config, seed)[0]

    def _capacity_load(self, in_flight: int | None) -> LoadConfig:
        return dataclasses.replace(self._load(), max_concurrency=in_flight)

    def _runs(self, config: ServingConfig, seed: int
              ) -> list[tuple[Sequence[Request], LoadConfig]]:
        """The capacity run, then the traffic run where the workload offers a rate."""
        first, in_flight = self.capacity_plan(config, seed)
        key = (seed, len(first), self.offered_rate)
        if key not in self._cache:
            more = () if self.offered_rate is None else (self._traffic(self.offered_rate, seed),)
            self._cache[key] = (first, more)
        first, more = self._cache[key]
        return [(first, self._capacity_load(in_flight)), *more]

    def _traffic(self, rate: float, seed: int) -> tuple[list[Request], LoadConfig]:
        """The traffic run of the draw ``seed``: the workload offered at ``rate``."""
        return (sample_requests(traffic_workload(self.workload, rate), self.num_requests,
                                seed=seed + TRAFFIC_SEED_OFFSET, vocab_size=self.vocab_size),
                self._load())

    def evaluate(self, config: ServingConfig, *, repeat: int = 0
                 ) -> tuple[TrialResult, Trial]:
        """The result (not yet numbered) and the trial itself."""
        seed = self.seed + 1000 * repeat
        prepared = self._prepared.pop((_key(config), repeat), None)
        if prepared is not None:
            return prepared
        trial = run_in_order(self.backend, config, self._runs(config, seed))
        return self.row(config, trial, seed=seed), trial

    def pop_prepared(self, config: ServingConfig, repeat: int = 0) -> TrialResult | None:
        """The row of an evaluation ``capacity`` already ran (once: it is taken)."""
        prepared = self._prepared.pop((_key(config), repeat), None)
        return prepared[0] if prepared is not None else None

    def capacity(self, config: ServingConfig,
                 rate_from: Callable[[SteadyState], float | None] | None = None
                 ) -> tuple[SteadyState | None, Trial]:
        """The capacity run (``--rate auto`` needs the baseline's before any traffic). With
        ``rate_from``, the offered rate it returns for the measured capacity becomes the
        evaluator's, and the traffic run follows on the same server: the whole evaluation of
        ``config``, which its first ``evaluate`` then returns instead of starting another."""
        first, in_flight = self.capacity_plan(config, self.seed)
        steady = None
        with self.backend.serve(config) as server:
            run = server.run(first, self._capacity_load(in_flight))
            if run is not None:
                steady = steady_state(run.records, run.duration_s)
                rate = rate_from(steady) if rate_from is not None else None
                if rate is not None:
                    self.rate = rate
                    server.run(*self._traffic(rate, self.seed))
        trial = server.trial
        if not trial.ok or steady is None:
            return None, trial
        if len(trial.runs) > 1:
            self._prepared[(_key(config), 0)] = (self.row(config, trial, seed=self.seed), trial)
        return steady, trial

    def probe_rates(self, config: ServingConfig, rates: Sequence[float], *,
                    repeat: int = 0) -> list[dict]:
        """One trial of ``config`` (one server) running the workload at each rate in turn, the
        workload's own arrival process (Poisson where it has none: rate inf, closed loops,
        traces); per rate: whether every SLO held, what was missed, the latencies."""
        load = self._load()
        runs = [(sample_requests(traffic_workload(self.workload, rate), self.num_requests,
                                 seed=self.seed + 104_729 * repeat + 31 * i,
                                 vocab_size=self.vocab_size), load)
                for i, rate in enumerate(rates)]
        trial = run_in_order(self.backend, config, runs)
        return [self._probe(rate, trial, trial.runs[i] if i < len(trial.runs) else None)
                for i, rate in enumerate(rates)]

    def _probe(self, rate: float, trial: Trial, run) -> dict:
        """One rung of the ladder: its latencies against the SLOs, or how the server failed
        before it ran."""
        probe: dict[str, Any] = {"rate": rate, "status": trial.status, "cause": trial.cause}
        if run is None:  # the server failed before this rate ran
            probe.update(metrics={}, missed=[], ok=False,
                         status=trial.status if trial.status != "ok" else "crash")
            return probe
        result = measure(run).result.to_dict()
        metrics = {k: result[k] for k in (*LATENCY_KEYS, "request_throughput", "failed")
                   if k in result}
        missed = [k for k, limit in self.slos.items() if k not in metrics or metrics[k] > limit]
        failed = bool(metrics.get("failed"))
        probe.update(metrics=metrics, missed=missed, ok=not missed and not failed)
        if not failed:
            probe.update(status="ok", cause=None)
        elif trial.ok:
            probe.update(status="failed", cause=f"{metrics['failed']} requests failed")
        return probe

    def row(self, config: ServingConfig, trial: Trial, *,
            seed: int | None = None) -> TrialResult:
        """``trial`` of ``config`` summarised: capacity from its first run's steady state,
        latencies from its traffic run (the first run where there is none), SLOs checked."""
        offered = self.offered_rate
        if not trial.ok or trial.run is None:
            return self._result(config, trial, {}, dict(trial.counters), over=False)
        capacity = measure(trial.run)
        traffic = measure(trial.runs[1]) if len(trial.runs) > 1 else capacity
        steady = steady_state(trial.run.records, trial.run.duration_s)
        metrics = _metrics(capacity, traffic, steady)
        facts = self._facts(trial, steady, capacity, traffic)
        # Over capacity (its latencies belong to a growing queue, not to the server) only
        # where the capacity falls short of the offered rate by more than the resolution:
        # on an H100 (2026-12-06) a 128-sequence server read 58.8 req/s against 59.3
        # offered while a long run of the same configuration served 70.5. Within the
        # resolution its latencies stand, but no pick is made of it (TrialResult.keeps_up).
        margin = RESOLUTION["measured" if self.measured else "sim"]
        over = offered is not None and steady.request_throughput * (1 + margin) < offered
        runs: list[dict] = []
        if self.measured:  # every run's own result, for calibrate --study
            seed = self.seed if seed is None else seed
            runs.append(_run_entry("capacity", trial.run, None, capacity, seed))
            if traffic is not capacity:
                runs.append(_run_entry("traffic", trial.runs[1], offered, traffic,
                                       seed + TRAFFIC_SEED_OFFSET))
        return self._result(config, trial, metrics, facts, over=over, runs=runs)

    def _facts(self, trial: Trial, steady: SteadyState, *measured: Any) -> dict[str, Any]:
        """The backend's counters, and what the runs showed beside the figures: the capacity
        window, the server's own counters, whether the client's streams arrived bunched."""
        assert trial.run is not None
        facts: dict[str, Any] = dict(trial.counters)
        facts.update(capacity_saturated=steady.saturated, peak_running=steady.peak_running,
                     capacity_requests=len(trial.run.records),
                     capacity_window_s=[round(t, 3) for t in steady.window_s],
                     capacity_duration_s=round(trial.run.duration_s, 3))
        if len(trial.runs) > 1:
            facts["traffic_duration_s"] = round(trial.runs[1].duration_s, 3)
        # Measured runs only: the simulator has no client to starve.
        if self.measured and any(bunched_streams(m.to_dict()) for m in measured):
            facts["bunched_streams"] = True  # latencies of the client's scheduling
        for m in measured:
            if m.server is not None:
                facts.setdefault("preemptions", m.server.preemptions)
                facts.setdefault("peak_kv_usage", m.server.peak_kv_cache_usage)
                facts.setdefault("spec_acceptance_rate", m.server.spec_acceptance_rate)
        return facts

    def _result(self, config: ServingConfig, trial: Trial, metrics: dict[str, Any],
                facts: dict[str, Any], *, over: bool, runs: Sequence[dict] = ()
                ) -> TrialResult:
        failed = metrics.get("failed")
        missed = [] if over else [key for key, limit in self.slos.items()
                                  if key not in metrics or metrics[key] > limit]
        memory = trial.server.memory
        return TrialResult(
            config=config_to_json(config), status=trial.status, cause=trial.cause,
            metrics=metrics, memory_bytes=memory.held_bytes if memory is not None else None,
            kv_cache_tokens=trial.server.kv_cache_tokens, offered_rate=self.offered_rate,
            over_capacity=over, slo_ok=trial.ok and not over and not missed and not failed,
            slo_missed=tuple(missed), facts={k: v for k, v in facts.items() if v is not None},
            seconds=round(trial.timings.total_s, 3), runs=tuple(runs))


def _metrics(capacity: Any, traffic: Any, steady: SteadyState) -> dict[str, Any]:
    """The row's figures: capacity from the steady state of the capacity run, latencies from
    the traffic run, requests failed in either."""
    cap, lat = capacity.result.to_dict(), traffic.result.to_dict()
    tokens_per_request = (cap["total_input_tokens"] + cap["total_output_tokens"]) / max(
        1, cap["completed"])
    metrics: dict[str, Any] = {
        "output_throughput": steady.output_throughput,
        "request_throughput": steady.request_throughput,
        "total_token_throughput": steady.request_throughput * tokens_per_request,
        "burst_output_throughput": cap["output_throughput"]}
    metrics.update({k: lat[k] for k in LATENCY_KEYS if k in lat})
    metrics["traffic_request_throughput"] = lat["request_throughput"]
    metrics["failed"] = cap["failed"] + lat["failed"] if traffic is not capacity \
        else cap["failed"]
    return metrics


def _key(config: ServingConfig) -> str:
    return json.dumps(config_to_json(config), sort_keys=True)


def _draw_floor(requests: Sequence[Request]) -> int:
    """Requests needed for the mean output length to be within ``DRAW_PRECISION``: (CV / it)²
    from the pilot's lengths (none for fixed lengths)."""
    outputs = [r.output_tokens for r in requests]
    if len(outputs) < 2:
        return 0
    mean = sum(outputs) / len(outputs)
    var = sum((x - mean) ** 2 for x in outputs) / (len(outputs) - 1)
    return math.ceil(var / (mean * DRAW_PRECISION) ** 2) if mean > 0 else 0


def _run_entry(kind: str, run, rate: float | None, measurement, seed: int) -> dict:
    """One run as stored with its row: enough to draw its requests again (calibrate --study)."""
    return {"kind": kind, "num_requests": len(run.records), "rate": rate, "seed": seed,
            "max_concurrency": None, "result": measurement.to_dict()}
