"""From a ``WorkloadSpec`` to the concrete requests of one run.

Prompts are token-id lists, so their lengths are exact whatever the server's tokenizer: ids are
drawn from ``[FIRST_TOKEN_ID, vocab_size)``, which avoids the special tokens every catalog model
keeps at the very start or end of its vocabulary. Requests of one shared-prefix group start with
the same ``prefix.length`` ids; the rest of every prompt is drawn per request, so two prompts
never share more than their group's prefix.

Arrival times follow ``vllm bench serve``: gaps ~ Gamma(shape=burstiness, scale=1/(rate x
burstiness)) (burstiness 1 is Poisson), ``constant`` spaces them evenly, ``inf`` and ``closed``
schedule everything at 0 (``closed`` leaves pacing to the concurrency limit), ``trace`` replays
recorded timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sweetspot._errors import SweetspotError
from sweetspot.spec.workload import WorkloadSpec

__all__ = ["FIRST_TOKEN_ID", "Request", "arrival_times", "sample_requests"]

FIRST_TOKEN_ID = 10
# Token ids below this are valid in every catalog model's vocabulary (the smallest is 32,000).
DEFAULT_VOCAB_SIZE = 32_000


@dataclass(frozen=True, slots=True)
class Request:
    request_id: int
    arrival_s: float  # scheduled send time from the run's start
    prompt_token_ids: tuple[int, ...]
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
    prefixes = [
        tuple(np.random.default_rng([seed, 100, g]).integers(
            FIRST_TOKEN_ID, vocab_size, size=spec.prefix.length).tolist())
        for g in range(spec.prefix.num_prefixes)
    ] if spec.prefix.length else []
    groups = rng_group.integers(0, max(spec.prefix.num_prefixes, 1), size=n)
    priorities = _priorities(spec, n, rng_priority)
    requests = []
    for i in range(n):
        entry = spec.trace[i % len(spec.trace)] if spec.trace else None
        unique = int(prompt_lens[i]) - (spec.prefix.length if has_prefix[i] else 0)
        ids = rng_ids.integers(FIRST_TOKEN_ID, vocab_size, size=unique).tolist()
        group = int(groups[i]) if has_prefix[i] else None
        if group is not None:
            ids = list(prefixes[group]) + ids
        requests.append(Request(
            request_id=i,
            arrival_s=float(times[i]),
            prompt_token_ids=tuple(ids),
            output_tokens=int(output_lens[i]),
            priority=entry.priority if entry else int(priorities[i]),
            prefix_group=group,
            prompt_text=entry.prompt_text if entry else None,
        ))
    return requests


def _priorities(spec: WorkloadSpec, n: int, rng: np.random.Generator
                ) -> npt.NDArray[np.int64]:
    if not spec.priorities:
        return np.zeros(n, dtype=np.int64)
    values = np.array([p.priority for p in spec.priorities])
    shares = np.array([p.share for p in spec.priorities])
    return rng.choice(values, size=n, p=shares / shares.sum())
