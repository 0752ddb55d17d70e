"""What `sweetspot calibrate` fits on: the built-in profile run against a live server, or the
runs a study measured in its own trials.

A study's real trials keep every run they made (``row["runs"]``: the kind, how many requests at
which rate and concurrency, and the result as ``bench --json`` writes it), and each trial ran its
own configuration. So each run becomes one observation carrying that configuration, and the fit
simulates every run with the server it really had — a study over ``max_num_seqs`` 8 to 256 is a
calibration profile across batch sizes for free. The requests are not stored: they are drawn
again the way the study drew them (``Evaluator``: the workload at rate inf for the capacity run,
the workload as given for the traffic run, from the study's seed), and each run's measured input
tokens must match the redrawn prompts, so a study drawn some other way is refused, not misfit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.backends.sim.calibration import (
    BATCH_REPEATS,
    PROFILE_WORKLOAD,
    observation_from_result,
    profile_poisson_rate,
)
from sweetspot.backends.sim.fit import Observation
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import sample_requests
from sweetspot.spec.workload import ArrivalSpec, WorkloadSpec, validate_workload, workload_to_dict
from sweetspot.tune.evaluate import TRAFFIC_SEED_OFFSET, traffic_workload

__all__ = ["RUNS_PER_ROUND", "profile_server", "study_observations"]

RUNS_PER_ROUND = 3 + BATCH_REPEATS["closed16"] + BATCH_REPEATS["inf"]  # + closed 1, 4, poisson
# How ``Evaluator`` draws a trial's traffic run apart from its capacity run.


def _repeat(i: int, of: int) -> str:
    return f" #{i + 1}" if of > 1 else ""


def profile_server(url: str, num_requests: int, vocab_size: int, seed: int = 1000,
                   workload: WorkloadSpec | None = None, realtime: bool = False,
                   rounds: int = 1, on_run: Callable[[str, int, int], None] | None = None,
                   ) -> list[tuple[str, dict[str, Any]]]:
    """Benchmark a live server with the built-in profile; results as ``bench --json`` writes
    them. Runs: closed loops of 1, 4 and 16 requests, rate inf (batches up to the server's
    max-num-seqs), then Poisson at half the rate inf reached (the median of its runs); the
    batch runs ``BATCH_REPEATS`` times. Each run draws fresh prompts (a
    new seed), so the prefix cache cannot help. Calibrate on the configuration with the largest
    batches you will simulate: predicting smaller batches interpolates, larger extrapolates.
    ``realtime``: the client runs SCHED_FIFO (``loadgen.client_priority``). ``rounds``: the
    profile that many times over, one round after the other, so that the fit averages a host
    whose speed drifts (on a 2-vCPU VM the same run reads up to ±25 % apart minutes later; the
    calibration test there had 17 of 18 cells within 15 % from six rounds, 11 to 16 from any
    two of them: benchmarks/RESULTS.md). ``on_run(label, done, total)``: as each run starts,
    with the number of runs finished and of all runs."""
    import asyncio

    from sweetspot.backends.endpoint import run_endpoint
    from sweetspot.backends.loadgen import LoadConfig, check_server
    from sweetspot.metrics.run import measure

    if rounds < 1:
        raise SweetspotError(f"profile rounds must be at least 1, not {rounds}")
    served = asyncio.run(check_server(url))
    if not served:
        raise SweetspotError(f"{url} serves no model")
    base = workload or validate_workload(dict(PROFILE_WORKLOAD), "profile")
    runs: list[tuple[str, dict[str, Any]]] = []
    total = RUNS_PER_ROUND * rounds

    def one(label: str, arrival: ArrivalSpec, n: int, concurrency: int | None,
            run_seed: int) -> dict[str, Any]:
        if on_run is not None:
            on_run(label, len(runs), total)
        wl = dataclasses.replace(base, arrival=arrival)
        requests = sample_requests(wl, n, seed=run_seed, vocab_size=vocab_size)
        config = LoadConfig(base_url=url, model=served[0], max_concurrency=concurrency,
                            realtime=realtime)
        data = measure(run_endpoint(requests, config, scrape_interval_s=0)).to_dict()
        data["sweetspot"] = {"url": url, "workload_spec": workload_to_dict(wl),
                             "num_requests": n, "seed": run_seed, "vocab_size": vocab_size,
                             "max_concurrency": concurrency}
        runs.append((f"{url} {label}", data))
        return data

    for r in range(rounds):
        _profile_round(one, num_requests, seed + 10 * r,
                       f" (round {r + 1})" if rounds > 1 else "")
    return runs


def _profile_round(run: Callable[[str, ArrivalSpec, int, int | None, int], dict[str, Any]],
                   num_requests: int, s: int, tag: str) -> None:
    """One round of the profile, ``RUNS_PER_ROUND`` runs from seed ``s`` on; ``run(label,
    arrival, requests, concurrency, seed)`` makes one and returns its result."""
    run(f"closed 1{tag}", ArrivalSpec(process="closed", concurrency=1),
        max(8, num_requests // 4), 1, s)
    run(f"closed 4{tag}", ArrivalSpec(process="closed", concurrency=4),
        max(8, num_requests // 2), 4, s + 1)
    for i in range(BATCH_REPEATS["closed16"]):
        run(f"closed 16{_repeat(i, BATCH_REPEATS['closed16'])}{tag}",
            ArrivalSpec(process="closed", concurrency=16), max(8, num_requests // 2), 16,
            s + 2 + i)
    batches = [run(f"rate inf{_repeat(i, BATCH_REPEATS['inf'])}{tag}", ArrivalSpec(process="inf"),
                   num_requests, None, s + 4 + i) for i in range(BATCH_REPEATS["inf"])]
    rate = profile_poisson_rate(data["request_throughput"] for data in batches)
    run(f"poisson {rate:.2f}{tag}", ArrivalSpec(process="poisson", rate=rate),
        num_requests // 2, None, s + 7)


def study_observations(data: Mapping[str, Any], vocab_size: int,
                       base: ServingConfig | None = None, on_top: Sequence[str] = (),
                       on_skip: Callable[[str, str], None] | None = None,
                       ) -> list[tuple[dict[str, Any], Observation]]:
    """One observation per clean run stored in the study's trials (``study_data``), each with
    its trial's configuration: ``base`` (what every server of the study ran, e.g. its fixed
    server options) under the trial's settings, then ``on_top`` (``knob=value`` items).
    ``vocab_size``: the one the study drew prompt ids below. Runs with failed requests are
    skipped (``on_skip(label, why)``); each item pairs the stored result with its
    observation."""
    from sweetspot.spec.knobs import parse_settings
    from sweetspot.tune.tuner import config_from_json

    base = base or ServingConfig()
    settings = data.get("settings") or {}
    rows = [row for row in data.get("trials") or () if row.get("runs")]
    if not rows:
        raise SweetspotError(
            f"study {data.get('study')!r} has no stored runs to calibrate on: only real trials "
            f"(--backend vllm or endpoint) keep them (this one: --backend "
            f"{settings.get('backend')}), and a study run by an older sweetspot has none")
    try:
        workload = validate_workload(dict(settings["workload"]), "the study's workload")
        seed = int(settings.get("seed", 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise SweetspotError(f"study {data.get('study')!r}: malformed settings: {exc}") from None
    out = []
    for row in rows:
        config = parse_settings(list(on_top), base.replace(
            **config_from_json(row["config"]).explicit()))
        for run in row["runs"]:
            label = f"trial {row['number']} {run.get('kind')}"
            try:
                result = dict(run["result"])
                requests = _requests_of(run, workload, seed, vocab_size)
                arrival = ("inf" if run["kind"] == "capacity" else workload.arrival.process)
            except (KeyError, TypeError, ValueError) as exc:
                raise SweetspotError(f"{label}: malformed stored run: {exc}") from None
            if int(result.get("failed") or 0):
                if on_skip is not None:
                    on_skip(label, f"{result['failed']} requests failed")
                continue
            sent = sum(r.prompt_tokens for r in requests)
            if int(result.get("total_input_tokens", -1)) != sent:
                raise SweetspotError(
                    f"{label}: its requests cannot be drawn again from the study's settings "
                    f"({result.get('total_input_tokens')} input tokens measured, {sent} "
                    "redrawn): it was not run the way this sweetspot draws a trial's runs")
            out.append((result, observation_from_result(
                result, label, requests, run.get("max_concurrency"), arrival, config)))
    return out


def _requests_of(run: Mapping[str, Any], workload: WorkloadSpec, seed: int, vocab_size: int):
    """The requests of one stored run, drawn as ``Evaluator`` drew them (a ``seed`` stored with
    the run wins)."""
    n = int(run["num_requests"])
    if run["kind"] == "capacity":
        wl = dataclasses.replace(workload, arrival=ArrivalSpec(process="inf"))
        run_seed = seed
    elif run["kind"] == "traffic":
        wl = workload if run.get("rate") is None else traffic_workload(workload,
                                                                         float(run["rate"]))
        run_seed = seed + TRAFFIC_SEED_OFFSET
    else:
        raise ValueError(f"unknown kind {run['kind']!r} (capacity or traffic)")
    if run.get("seed") is not None:
        run_seed = int(run["seed"])
    return tuple(sample_requests(wl, n, seed=run_seed, vocab_size=vocab_size))
