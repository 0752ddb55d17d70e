"""A trial's outcome as the study keeps it: ``TrialResult``, frozen, read by the tuner, the picks,
the confirmation and the rate search as attributes; turned into JSON only at the store's edge
(``to_dict`` / ``from_dict``), which is also what ``study_data`` hands the report and the CLI.

Its ``metrics`` use ``vllm bench serve``'s keys: the capacity figures (``output_throughput``,
``request_throughput``, ``total_token_throughput``) from the capacity run's steady state, the
latencies (``p99_ttft_ms`` ...) from the traffic run. A new metric is a new key there, made in
``tune.evaluate`` and read by name where it is used; a new field is a new line here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sweetspot._errors import SweetspotError

__all__ = ["THROUGHPUT", "TrialResult"]

THROUGHPUT = "output_throughput"  # the capacity every goal speaks of (output tokens/s)


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One configuration's trial, summarised."""

    config: Mapping[str, Any]  # its explicit settings, JSON-ready (``evaluate.config_to_json``)
    status: str  # backends.base.STATUSES
    cause: str | None = None  # one line; None when ok
    metrics: Mapping[str, float] = field(default_factory=dict)  # empty when it did not run
    memory_bytes: int | None = None  # the server's peak (device, else host RSS)
    kv_cache_tokens: int | None = None
    offered_rate: float | None = None  # req/s of the traffic run; None: the workload's own
    over_capacity: bool = False  # its capacity is short of the offered rate (beyond noise)
    slo_ok: bool = False  # ran, kept up, every SLO held, no request failed
    slo_missed: tuple[str, ...] = ()  # the SLO keys it missed
    facts: Mapping[str, Any] = field(default_factory=dict)  # counters: preemptions, batch, ...
    seconds: float = 0.0  # wall time of the trial
    runs: tuple[Mapping[str, Any], ...] = ()  # measured trials: each run's bench result
    number: int | None = None  # the study's trial number, once stored
    phase: str | None = None  # baseline, ofat, combined, optuna, grid, simplify
    knob: str | None = None  # the knob an ofat trial swept
    duplicate_of: int | None = None  # a sampler's repeat of that trial's configuration

    def __post_init__(self) -> None:
        for name in ("config", "metrics", "facts"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        object.__setattr__(self, "slo_missed", tuple(self.slo_missed))
        object.__setattr__(self, "runs", tuple(_frozen(r) for r in self.runs))

    @property
    def ran(self) -> bool:
        """It ran to the end and has figures."""
        return self.status == "ok" and bool(self.metrics)

    @property
    def throughput(self) -> float:
        """Capacity in output tokens/s (0 when it did not run)."""
        return float(self.metrics.get(THROUGHPUT, 0.0))

    @property
    def request_rate(self) -> float:
        """Capacity in requests/s (0 when it did not run)."""
        return float(self.metrics.get("request_throughput", 0.0))

    @property
    def keeps_up(self) -> bool:
        """It serves the offered rate: its capacity is at least that rate (a row can fall short
        without being flagged over capacity, by less than the resolution)."""
        return self.offered_rate is None or self.request_rate >= self.offered_rate

    def stored(self, number: int, phase: str, knob: str | None) -> TrialResult:
        """This result as the study's trial ``number``."""
        return dataclasses.replace(self, number=number, phase=phase, knob=knob)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the store keeps (and the report reads)."""
        out: dict[str, Any] = {
            "config": dict(self.config), "status": self.status, "cause": self.cause,
            "metrics": dict(self.metrics), "memory_bytes": self.memory_bytes,
            "kv_cache_tokens": self.kv_cache_tokens, "offered_rate": self.offered_rate,
            "over_capacity": self.over_capacity, "slo_ok": self.slo_ok,
            "slo_missed": list(self.slo_missed), "facts": dict(self.facts),
            "seconds": self.seconds}
        if self.runs:
            out["runs"] = [dict(r) for r in self.runs]
        if self.number is not None:
            out.update(number=self.number, phase=self.phase, knob=self.knob)
        if self.duplicate_of is not None:
            out["duplicate_of"] = self.duplicate_of
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialResult:
        """A stored row; an unknown key is an error naming it (a newer sweetspot wrote it)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SweetspotError(f"a stored trial has unknown field(s) {', '.join(unknown)}: "
                                 "written by another version of sweetspot?")
        missing = sorted({"config", "status"} - set(data))
        if missing:
            raise SweetspotError(f"a stored trial lacks {', '.join(missing)}")
        values = dict(data)
        values["slo_missed"] = tuple(values.get("slo_missed") or ())
        values["runs"] = tuple(values.get("runs") or ())
        return cls(**values)
