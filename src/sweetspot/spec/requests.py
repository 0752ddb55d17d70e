"""From a ``WorkloadSpec`` to the concrete requests of one run.

Prompts are token-id lists, so their lengths are exact whatever the server's tokenizer: ids are
drawn from ``[FIRST_TOKEN_ID, vocab_size)``, which avoids the special tokens every catalog model
keeps at the very start or end of its vocabulary. Requests of one shared-prefix group start with
the same ``prefix.length`` ids; the rest of every prompt is drawn per request, so two prompts
never share more than their group's prefix. A run's ids are drawn as one array and each request
holds a read-only slice of it (``TokenIds``, which reads as the tuple it stands for).

Arrival times follow ``vllm bench serve``: gaps ~ Gamma(shape=burstiness, scale=1/(rate x
burstiness)) (burstiness 1 is Poisson), ``constant`` spaces them evenly, ``inf`` and ``closed``
schedule everything at 0 (``closed`` leaves pacing to the concurrency limit), ``trace`` replays
recorded timestamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sweetspot._errors import SweetspotError
from sweetspot.spec.token_ids import TokenIds
from sweetspot.spec.workload import WorkloadSpec

__all__ = ["FIRST_TOKEN_ID", "Request", "TokenIds", "arrival_times", "sample_requests"]

FIRST_TOKEN_ID = 10
# Token ids below this are valid in every catalog model's vocabulary (the smallest is 32,000).
DEFAULT_VOCAB_SIZE = 32_000


@dataclass(frozen=True, slots=True)
class Request:
    request_id: int
    arrival_s: float  # scheduled send time from the run's start
    prompt_token_ids: Sequence[int]  # a tuple, or a sampled run's TokenIds
    output_tokens: int  # sent as max_tokens with ignore_eos, so the output has this length
    priority: int = 0
    prefix_group: int | None = None
    prompt_text: str | None = None  # set for recorded traces with text (chat endpoint)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


def arrival_times(spec: WorkloadSpec, n: int, rng: np.random.Generator
                  ) -> npt.NDArray[np.float64]:
    """Scheduled send times (seconds from the start) of ``n`` requests."""
    arrival = spec.arrival
    if arrival.process in ("inf", "closed"):
        return np.zeros(n)
    if arrival.process == "trace":
        times = [e.arrival_s for e in spec.trace]
        if not spec.trace or any(t is None for t in times):
            raise SweetspotError("arrival 'trace' needs a trace whose entries carry timestamps")
        base = np.asarray(times, dtype=np.float64)
        base -= base.min()
        span: float = base.max() + (base.max() / max(len(base) - 1, 1))
        reps = np.arange(n) // len(base)  # replay again after the end, shifted by one span
        return base[np.arange(n) % len(base)] + reps * span
    if arrival.rate is None:
        raise SweetspotError(f"arrival process {arrival.process!r} needs a rate (req/s)")
    if arrival.process == "constant":
        gaps = np.full(n, 1.0 / arrival.rate)
    else:
        shape = 1.0 if arrival.process == "poisson" else arrival.burstiness
        gaps = rng.gamma(shape, 1.0 / (arrival.rate * shape), size=n)
    gaps[0] = 0.0  # the first request goes at the start, as vLLM's client sends it
    return np.cumsum(gaps)


MAX_REQUESTS = 1_000_000


def sample_requests(
    spec: WorkloadSpec,
    n: int | None = None,
    *,
    seed: int | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> list[Request]:
    """The ``n`` requests of one run; the same spec and seed give the same list anywhere."""
    n = spec.num_requests if n is None else n
    if n > MAX_REQUESTS:  # each holds its prompt's token ids: a run must fit in memory
        raise SweetspotError(f"{n:,} requests are more than one run holds (at most "
                             f"{MAX_REQUESTS:,}); split it into several runs")
    if vocab_size <= FIRST_TOKEN_ID + 1:
        raise SweetspotError(f"vocabulary of {vocab_size} tokens is too small for prompts")
    seed = spec.seed if seed is None else seed
    prompt_lens, output_lens, has_prefix = spec.sample_lengths(n, seed)
    # Independent streams for each concern, so adding priorities does not move the arrivals.
    rng_arrival, rng_ids, rng_group, rng_priority = (
        np.random.default_rng([seed, k]) for k in range(4))
    times = arrival_times(spec, n, rng_arrival)
    groups = rng_group.integers(0, max(spec.prefix.num_prefixes, 1), size=n)
    priorities = _priorities(spec, n, rng_priority)
    ids = _prompt_ids(spec, prompt_lens, has_prefix, groups, rng_ids, seed, vocab_size)
    bounds = np.concatenate(([0], np.cumsum(prompt_lens))).tolist()
    group_of = np.where(has_prefix, groups, -1).tolist()
    trace = spec.trace
    requests = []
    for i, (at, out, priority, group) in enumerate(zip(
            times.tolist(), output_lens.tolist(), priorities.tolist(), group_of, strict=True)):
        entry = trace[i % len(trace)] if trace else None
        requests.append(Request(
            request_id=i,
            arrival_s=at,
            prompt_token_ids=TokenIds(ids, bounds[i], bounds[i + 1]),
            output_tokens=out,
            priority=entry.priority if entry else priority,
            prefix_group=None if group < 0 else group,
            prompt_text=entry.prompt_text if entry else None,
        ))
    return requests


def _prompt_ids(spec: WorkloadSpec, prompt_lens: npt.NDArray[np.int64],
                has_prefix: npt.NDArray[np.bool_], groups: npt.NDArray[np.int64],
                rng: np.random.Generator, seed: int, vocab_size: int
                ) -> npt.NDArray[np.integer[Any]]:
    """Every prompt's ids, end to end: a group's shared prefix where the request carries one,
    then its own ids, drawn request after request from ``rng`` (one draw for all of them gives
    the same ids as one draw per request, and int32 draws equal int64 ones)."""
    prefix_len = spec.prefix.length
    dtype = np.int32 if vocab_size <= 2**31 else np.int64
    own = prompt_lens - np.where(has_prefix, prefix_len, 0)
    own_ids = rng.integers(FIRST_TOKEN_ID, vocab_size, size=int(own.sum()), dtype=dtype)
    if not prefix_len or not has_prefix.any():
        ids: npt.NDArray[np.integer[Any]] = own_ids
    else:
        prefixes = np.array([
            np.random.default_rng([seed, 100, g]).integers(
                FIRST_TOKEN_ID, vocab_size, size=prefix_len, dtype=dtype)
            for g in range(spec.prefix.num_prefixes)])
        carriers = np.flatnonzero(has_prefix)
        starts = np.cumsum(prompt_lens) - prompt_lens
        column = np.tile(np.arange(prefix_len), len(carriers))
        at = np.repeat(starts[carriers], prefix_len) + column  # where the prefixes go
        ids = np.empty(int(prompt_lens.sum()), dtype=dtype)
        ids[at] = prefixes[np.repeat(groups[carriers], prefix_len), column]
        own_place = np.ones(len(ids), dtype=bool)
        own_place[at] = False
        ids[own_place] = own_ids  # in order: each request's own ids after its prefix
    ids.flags.writeable = False
    return ids


def _priorities(spec: WorkloadSpec, n: int, rng: np.random.Generator
                ) -> npt.NDArray[np.int64]:
    if not spec.priorities:
        return np.zeros(n, dtype=np.int64)
    values = np.array([p.priority for p in spec.priorities])
    shares = np.array([p.share for p in spec.priorities])
    return rng.choice(values, size=n, p=shares / shares.sum())
