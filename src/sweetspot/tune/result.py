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

__all__ = ["THROUGHPUT", "PickResult", "StudyResult", "TrialResult"]

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


@dataclass(frozen=True, slots=True)
class PickResult:
    """One goal's pick as the study stores it: the trial, its gain over the baseline, why, and
    the command (and YAML) that serves it."""

    goal: str  # picks.GOALS
    trial: int | None  # the picked trial's number
    gain: Mapping[str, float] = field(default_factory=dict)  # relative: +0.35 = 35 % more
    reasons: tuple[str, ...] = ()
    command: str | None = None  # `vllm serve ...` for the user's release
    yaml: str | None = None  # the same as a vLLM config file
    rivals: tuple[int, ...] = ()  # trials a simulated study cannot separate from this one

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _frozen(self.gain))
        object.__setattr__(self, "reasons", tuple(self.reasons))
        object.__setattr__(self, "rivals", tuple(self.rivals))

    def to_dict(self) -> dict[str, Any]:
        return {"goal": self.goal, "trial": self.trial, "gain": dict(self.gain),
                "reasons": list(self.reasons), "command": self.command, "yaml": self.yaml,
                "rivals": list(self.rivals)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PickResult:
        return cls(goal=str(data.get("goal")), trial=data.get("trial"),
                   gain=data.get("gain") or {}, reasons=tuple(data.get("reasons") or ()),
                   command=data.get("command"), yaml=data.get("yaml"),
                   rivals=tuple(int(n) for n in data.get("rivals") or ()))


@dataclass(frozen=True, slots=True)
class StudyResult:
    """A finished (or interrupted) study as the report and the CLI read it: what was tuned, every
    trial, the picks, the Pareto front, the confirmation and the rate search. Absent parts read
    as none (a study of only a baseline, an interrupted one): never an error."""

    # The fields in the order trials.json has always listed them (``to_dict`` follows it).
    study: str  # its name
    storage: str | None = None  # where it is stored (a URL, its password masked)
    model: str | None = None
    gpu: str | None = None
    vllm_version: str | None = None
    workload: str | None = None  # the workload's name
    backend: str | None = None  # sim, vllm or endpoint
    objective: str | None = None
    slos: Mapping[str, float] = field(default_factory=dict)  # key -> limit (ms)
    baseline: int | None = None  # the baseline's trial number
    trials: tuple[TrialResult, ...] = ()  # by trial number
    picks: tuple[PickResult, ...] = ()
    pareto: tuple[int, ...] = ()  # trial numbers on the throughput/latency front
    confirmation: Mapping[str, Any] | None = None  # confirm.Confirmation.to_dict()
    settings: Mapping[str, Any] = field(default_factory=dict)  # StudySettings.to_dict()
    rate_search: Mapping[str, Any] | None = None  # rate.RateSearch.to_dict() (or its error)
    offered_rate: float | None = None  # req/s the traffic runs offered
    rate_note: str | None = None  # how --rate auto chose it
    resolution: float | None = None  # the smallest difference a pick acts on
    emulation: Mapping[str, Any] | None = None  # --emulate-gpus: makespan against the ideal

    def __post_init__(self) -> None:
        object.__setattr__(self, "trials", tuple(self.trials))
        object.__setattr__(self, "picks", tuple(self.picks))
        object.__setattr__(self, "pareto", tuple(self.pareto))
        for name in ("slos", "settings"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def trial(self, number: int | None) -> TrialResult | None:
        """The trial numbered ``number`` (None when absent)."""
        return next((t for t in self.trials if number is not None and t.number == number), None)

    @property
    def baseline_trial(self) -> TrialResult | None:
        return self.trial(self.baseline)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``trials.json``; what earlier versions handed the report)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name)
                               for f in dataclasses.fields(self)}
        out.update(trials=[t.to_dict() for t in self.trials],
                   picks=[p.to_dict() for p in self.picks], pareto=list(self.pareto),
                   slos=dict(self.slos), settings=_plain(self.settings))
        if self.emulation is None:  # only a planned study (--emulate-gpus) has one
            del out["emulation"]
        else:
            out["emulation"] = _plain(self.emulation)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudyResult:
        """A study's JSON (``study_data``, a saved ``trials.json``); unknown keys are ignored:
        a report may carry more than the study (its own additions)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["study"] = str(data.get("study") or "study")
        values["trials"] = tuple(TrialResult.from_dict(t) for t in data.get("trials") or ())
        values["picks"] = tuple(PickResult.from_dict(p) for p in data.get("picks") or ())
        values["pareto"] = tuple(data.get("pareto") or ())
        values["slos"] = data.get("slos") or {}
        values["settings"] = data.get("settings") or {}
        return cls(**values)


def _plain(value: Any) -> Any:
    """Read-only mappings (and nested ones) as plain dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
