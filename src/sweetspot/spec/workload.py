"""Traffic descriptions: length distributions, shared prefixes, arrivals and priority classes.

A ``WorkloadSpec`` is frozen data; its classes are pydantic dataclasses because they are what
users write (YAML or JSON files, presets), so a malformed file fails with the field's name
(``load_workload``). Every draw takes an explicit seed, so the same spec and
seed give the same lengths in any process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass as plain_dataclass
from dataclasses import field
from functools import cache
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from sweetspot._errors import SweetspotError
from sweetspot.spec.presets import PRESET_DATA as _PRESET_DATA
from sweetspot.spec.presets import PRESETS

__all__ = [
    "PRESETS",
    "ArrivalSpec",
    "LengthStats",
    "PrefixSpec",
    "PriorityClass",
    "TraceEntry",
    "WorkloadSpec",
    "WorkloadStats",
    "preset",
    "validate_workload",
    "workload_stats",
    "workload_to_dict",
]


TokenCounts = npt.NDArray[np.int64]  # token counts, one per request
# The classes' schemas are built once, inside the adapter's (each built on its own took 23 ms
# of every command's start).
_DEFERRED = ConfigDict(defer_build=True)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class Fixed:
    kind: Literal["fixed"]
    value: int = Field(ge=1)

    def sample(self, rng: np.random.Generator, n: int) -> TokenCounts:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class Uniform:
    kind: Literal["uniform"]
    low: int = Field(ge=1)
    high: int = Field(ge=1)  # inclusive

    def sample(self, rng: np.random.Generator, n: int) -> TokenCounts:
        if self.high < self.low:
            raise SweetspotError(f"uniform length: high ({self.high}) < low ({self.low})")
        return rng.integers(self.low, self.high + 1, size=n)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class Normal:
    kind: Literal["normal"]
    mean: float = Field(gt=0)
    std: float = Field(ge=0)
    min: int = Field(default=1, ge=1)
    max: int | None = None

    def sample(self, rng: np.random.Generator, n: int) -> TokenCounts:
        return _clip(rng.normal(self.mean, self.std, size=n), self.min, self.max)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class LogNormal:
    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)  # of the underlying normal
    min: int = Field(default=1, ge=1)
    max: int | None = None

    def sample(self, rng: np.random.Generator, n: int) -> TokenCounts:
        return _clip(rng.lognormal(np.log(self.median), self.sigma, size=n), self.min, self.max)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class Empirical:
    """Lengths drawn with replacement from observed values (e.g. a trace)."""

    kind: Literal["empirical"]
    values: tuple[int, ...] = Field(min_length=1)

    def sample(self, rng: np.random.Generator, n: int) -> TokenCounts:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n)


def _clip(x: npt.NDArray[np.float64], low: int, high: int | None) -> TokenCounts:
    return np.clip(np.rint(x), low, high if high is not None else None).astype(np.int64)


Length = Annotated[Fixed | Uniform | Normal | LogNormal | Empirical, Field(discriminator="kind")]


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class PrefixSpec:
    """Shared prompt prefixes: a fixed system prompt (1 prefix, share 1), a few variants
    ("slightly varying prefix"), or none (share 0)."""

    length: int = Field(default=0, ge=0)  # tokens of each shared prefix
    num_prefixes: int = Field(default=1, ge=1)  # distinct prefixes
    share: float = Field(default=0.0, ge=0, le=1)  # fraction of requests that carry one


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class ArrivalSpec:
    """When requests are sent. ``inf`` sends all at once; ``closed`` keeps ``concurrency``
    requests in flight; gamma gaps have shape ``burstiness`` (1 = Poisson)."""

    process: Literal["poisson", "gamma", "constant", "inf", "closed", "trace"] = "poisson"
    rate: float | None = Field(default=None, gt=0)  # requests per second
    burstiness: float = Field(default=1.0, gt=0)
    concurrency: int | None = Field(default=None, ge=1)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class PriorityClass:
    name: str
    priority: int  # vLLM's request priority: lower is served first
    share: float = Field(gt=0, le=1)


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class TraceEntry:
    """One recorded request: lengths, and when and how it was sent."""

    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    arrival_s: float | None = Field(default=None, ge=0)  # from the trace's start
    priority: int = 0
    prompt_text: str | None = None  # the original text, for the chat endpoint


@dataclass(frozen=True, slots=True, config=_DEFERRED)
class WorkloadSpec:
    name: str
    prompt: Length  # tokens after the shared prefix
    output: Length
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    arrival: ArrivalSpec = field(default_factory=ArrivalSpec)
    priorities: tuple[PriorityClass, ...] = ()
    num_requests: int = Field(default=1000, ge=1)
    seed: int = 0
    description: str = ""
    trace: tuple[TraceEntry, ...] = ()  # recorded requests, replayed in order (loaders fill it)

    def sample_lengths(self, n: int | None = None, seed: int | None = None
                       ) -> tuple[TokenCounts, TokenCounts, npt.NDArray[np.bool_]]:
        """(prompt tokens incl. prefix, output tokens, carries-a-prefix) for n requests."""
        n = self.num_requests if n is None else n
        if self.trace:
            picks = [self.trace[i % len(self.trace)] for i in range(n)]
            prompt = np.array([e.prompt_tokens for e in picks], dtype=np.int64)
            output = np.array([e.output_tokens for e in picks], dtype=np.int64)
            return prompt, output, np.zeros(n, dtype=bool)
        rng = np.random.default_rng(self.seed if seed is None else seed)
        unique = self.prompt.sample(rng, n)
        output = self.output.sample(rng, n)
        has_prefix = rng.random(n) < self.prefix.share if self.prefix.length else np.zeros(
            n, dtype=bool)
        return unique + has_prefix * self.prefix.length, output, has_prefix


_ADAPTER = TypeAdapter(WorkloadSpec)


def validate_workload(data: Mapping[str, object], origin: str) -> WorkloadSpec:
    """A WorkloadSpec from plain data (a parsed file), or a one-line error naming the field."""
    try:
        spec = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise SweetspotError(
            f"malformed workload {origin}: {where}: {first['msg']}"
            + (f" ({exc.error_count() - 1} more)" if exc.error_count() > 1 else "")
        ) from None
    if spec.priorities and abs(sum(p.share for p in spec.priorities) - 1) > 1e-6:
        raise SweetspotError(f"malformed workload {origin}: priority shares must add up to 1")
    spec.sample_lengths(1)  # raises on inconsistent distributions (high < low)
    return spec


def workload_to_dict(spec: WorkloadSpec) -> dict[str, Any]:
    """Plain JSON-able data that ``validate_workload`` turns back into an equal spec."""
    data: dict[str, Any] = _ADAPTER.dump_python(spec, mode="json")  # the fields, as JSON
    return data


@cache
def preset(name: str) -> WorkloadSpec:
    return validate_workload({"name": name, **_PRESET_DATA[name]}, f"preset {name}")


@plain_dataclass(frozen=True, slots=True)
class LengthStats:
    mean: float
    p50: float
    p90: float
    p99: float
    max: int


@plain_dataclass(frozen=True, slots=True)
class WorkloadStats:
    num_requests: int
    prompt: LengthStats  # prefix included
    output: LengthStats
    total: LengthStats  # prompt + output of one request
    prefix_share: float  # fraction of requests carrying a shared prefix
    prefix_tokens_share: float  # fraction of all prompt tokens that are shared prefix
    arrival_rate: float | None  # requests per second, None for inf / closed loop


def _length_stats(x: TokenCounts) -> LengthStats:
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return LengthStats(float(x.mean()), float(p50), float(p90), float(p99), int(x.max()))


def workload_stats(spec: WorkloadSpec, n: int = 10_000) -> WorkloadStats:
    """Statistics of ``n`` seeded draws from ``spec``."""
    prompt, output, has_prefix = spec.sample_lengths(n)
    rate = spec.arrival.rate if spec.arrival.process not in ("inf", "closed", "trace") else None
    times = [e.arrival_s for e in spec.trace if e.arrival_s is not None]
    if spec.arrival.process == "trace" and len(times) > 1 and max(times) > min(times):
        rate = (len(times) - 1) / (max(times) - min(times))
    prefix_tokens = float((has_prefix * spec.prefix.length).sum())
    return WorkloadStats(
        num_requests=n,
        prompt=_length_stats(prompt),
        output=_length_stats(output),
        total=_length_stats(prompt + output),
        prefix_share=float(has_prefix.mean()),
        prefix_tokens_share=prefix_tokens / float(prompt.sum()),
        arrival_rate=rate,
    )
