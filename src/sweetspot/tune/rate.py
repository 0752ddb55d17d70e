"""Goodput capacity: the highest request rate at which one configuration still meets the SLOs.

Throughput at rate inf says how fast a server drains a queue; users see latency at the rate
they send. Between the two lies the number operators size fleets with: the rate a replica can
take before P99 TTFT or TPOT breaks the SLO. The search:

1. the configuration's capacity C (requests/s at rate inf) comes from its study row;
2. a ladder of rates, 0.2 C ... 1.0 C, runs in one trial (one server: on real vLLM each start-up
   costs a minute), the workload's arrival process at each rate;
3. a second ladder of four rates between the highest rate that met every SLO and the first that
   missed refines the answer to 4 % of C.

SLO compliance is taken as monotone in the rate (queues only grow with it): the answer is the
highest passing rate below the lowest failure that no pass lies above; a failure below a pass is
noise and is shown, not obeyed. Rates above C are not probed: past capacity the
queue grows for as long as the run lasts, so any pass there is an artefact of a short run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.result import TrialResult

__all__ = ["FIRST_LADDER", "RateSearch", "search_rate"]

FIRST_LADDER = (0.2, 0.4, 0.6, 0.8, 1.0)  # fractions of the capacity
REFINE_STEPS = 4


@dataclass
class RateSearch:
    """The search's state and answer, as stored with the study (``to_dict``)."""

    trial: int  # the study row of the configuration searched
    capacity_rps: float
    slos: dict[str, float]
    probes: list[dict] = field(default_factory=list)  # rate, ok, missed, metrics, status
    rounds: int = 0

    @property
    def max_rate(self) -> float | None:
        """The highest passing rate below ``first_failure``; None if none passed."""
        limit = self.first_failure
        passed = [p["rate"] for p in self.probes
                  if p["ok"] and (limit is None or p["rate"] < limit)]
        return max(passed) if passed else None

    @property
    def first_failure(self) -> float | None:
        """The lowest failing rate above which nothing passed: a failure with passes above it
        is noise (compliance only gets worse with the rate), so it does not cap the answer."""
        probes = sorted(self.probes, key=lambda p: p["rate"])
        highest_pass = max((p["rate"] for p in probes if p["ok"]), default=None)
        failed = [p["rate"] for p in probes if not p["ok"]
                  and (highest_pass is None or p["rate"] > highest_pass)]
        return min(failed) if failed else None

    def next_rates(self) -> list[float]:
        """Rates still to probe: the first ladder, then one refinement; [] when done."""
        c = self.capacity_rps
        if self.rounds == 0:
            return [round(c * f, 6) for f in FIRST_LADDER]
        if self.rounds > 1:
            return []
        hi = self.first_failure
        if hi is None:  # every SLO held up to capacity: nothing above to refine
            return []
        lo = self.max_rate or 0.0
        if lo >= hi:
            return []
        step = (hi - lo) / (REFINE_STEPS + 1)
        return [round(lo + step * (i + 1), 6) for i in range(REFINE_STEPS)]

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "capacity_rps": self.capacity_rps, "slos": self.slos,
                "probes": self.probes, "rounds": self.rounds, "max_rate": self.max_rate,
                "limited_by": self.limited_by()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RateSearch:
        return cls(int(data["trial"]), float(data["capacity_rps"]), dict(data["slos"]),
                   [dict(p) for p in data.get("probes", [])], int(data.get("rounds", 0)))

    def limited_by(self) -> list[str]:
        """The SLOs missed at the first failing rate: what caps the goodput."""
        hi = self.first_failure
        if hi is None:
            return []
        probe = next(p for p in self.probes if p["rate"] == hi)
        if probe["missed"]:
            return list(probe["missed"])
        return [f"{probe['status']}: {probe['cause']}" if probe.get("cause") else probe["status"]]


def search_rate(evaluator: Evaluator, config: ServingConfig, row: TrialResult,
                state: RateSearch | None = None,
                on_round: Callable[[RateSearch], None] | None = None) -> RateSearch:
    """Run (or continue, from ``state``) the rate search for ``config`` whose study row is
    ``row``; ``on_round`` is called after each ladder (the study stores the state there, so an
    interrupted search resumes losing at most the ladder in flight)."""
    if state is None:
        if row.status != "ok" or "request_throughput" not in row.metrics:
            raise SweetspotError(f"no rate search on trial {row.number}: it did not "
                                 f"run ({row.status}: {row.cause})")
        state = RateSearch(int(row.number or 0), row.request_rate, dict(evaluator.slos))
    while rates := state.next_rates():
        probes = evaluator.probe_rates(config, rates, repeat=state.rounds + 1)
        state.probes.extend(probes)
        state.rounds += 1
        if on_round is not None:
            on_round(state)
    return state

