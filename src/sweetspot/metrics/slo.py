"""Service-level objectives as users write them: one syntax for every command.

Three spellings, each with one meaning wherever it is given:

- ``p99_ttft=300ms`` (any of ``mean``, ``median``, ``pNN`` with NN from 0 to 100, ``p99.9``
  too): a limit on that statistic of the run, i.e. on the result key ``p99_ttft_ms``.
- ``ttft=300ms`` (bare): its P99, as ``tune`` has always read it. For ``ttft``, ``tpot`` and
  ``e2el`` it is also a limit on every single request, which is what goodput counts (vLLM's
  ``--goodput``); ``itl`` has no per-request goodput in vLLM, so only its P99 applies.
- ``ttft:300`` (vLLM's ``--goodput`` spelling): the same as bare ``ttft=300ms``.

Values are milliseconds, or take a unit: ``300ms``, ``2s``. Items are separated by commas or
spaces. Everything is checked here, before a run starts, so a typo costs milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.metrics.serve import LATENCY_NAMES, SLO_NAMES, percentile_word

__all__ = ["BARE_STAT", "Slo", "SloCheck", "Slos", "check_slos", "parse_slos"]

BARE_STAT = "p99"  # what a bare metric (``ttft=300ms``, ``ttft:300``) limits
_STAT = re.compile(r"mean|median|p(\d+(?:\.\d+)?)")
_SYNTAX = ("expected p99_ttft=300ms, ttft=300ms or ttft:300 (metrics "
           f"{', '.join(LATENCY_NAMES)}; statistics mean, median, pNN)")


@dataclass(frozen=True, slots=True)
class Slo:
    metric: str  # one of LATENCY_NAMES
    stat: str  # "mean", "median" or "pNN", NN as vLLM writes it in keys ("p99", "p99.9")
    limit_ms: float  # > 0
    per_request: bool  # bare ttft, tpot or e2el: every request is held to it too (goodput)

    @property
    def key(self) -> str:
        """The result key the limit applies to, e.g. ``p99_ttft_ms``."""
        return f"{self.stat}_{self.metric}_ms"

    @property
    def percentile(self) -> float | None:
        return float(self.stat[1:]) if self.stat.startswith("p") else None


@dataclass(frozen=True, slots=True)
class SloCheck:
    slo: Slo
    measured_ms: float | None  # None when the result lacks the statistic
    met: bool


@dataclass(frozen=True, slots=True)
class Slos:
    items: tuple[Slo, ...] = ()  # in the order given

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def limits_ms(self) -> dict[str, float]:
        """Result key -> limit: what ``tune`` checks each trial against."""
        return {s.key: s.limit_ms for s in self.items}

    @property
    def goodput_ms(self) -> dict[str, float]:
        """Metric -> per-request limit, as vLLM's ``--goodput`` takes them."""
        return {s.metric: s.limit_ms for s in self.items if s.per_request}

    @property
    def percentiles(self) -> tuple[float, ...]:
        """The percentiles the limits need measured."""
        return tuple(dict.fromkeys(p for s in self.items if (p := s.percentile) is not None))


def parse_slos(text: str | None, *, stats: Collection[str] | None = None) -> Slos:
    """Parse ``--slo`` (see the module docstring). ``stats`` limits the statistics accepted
    (a command that measures only some of them); None accepts all."""
    items: list[Slo] = []
    for part in filter(None, re.split(r"[,\s]+", text or "")):
        slo = _parse_one(part)
        if stats is not None and slo.stat not in stats:
            raise SweetspotError(f"bad SLO {part!r}: this command checks "
                                 f"{', '.join(stats)} only")
        if any(s.key == slo.key for s in items):
            raise SweetspotError(f"bad SLO {part!r}: {slo.stat}_{slo.metric} is given twice "
                                 f"(a bare metric means its {BARE_STAT.upper()})")
        items.append(slo)
    return Slos(tuple(items))


def _parse_one(part: str) -> Slo:
    eq, colon = part.find("="), part.find(":")
    if eq < 0 and colon < 0:
        raise SweetspotError(f"bad SLO {part!r}: {_SYNTAX}")
    vllm_style = colon >= 0 and (eq < 0 or colon < eq)
    name, _, value = part.partition(":" if vllm_style else "=")
    name = name.strip().lower().removesuffix("_ms")
    stat, _, metric = name.rpartition("_")
    if metric not in LATENCY_NAMES:
        raise SweetspotError(f"bad SLO {part!r}: {_SYNTAX}")
    if vllm_style and stat:
        raise SweetspotError(f"bad SLO {part!r}: {metric}:N is vLLM's --goodput spelling, a "
                             f"limit per request; for a statistic write {stat}_{metric}=Nms")
    per_request = not stat and metric in SLO_NAMES
    if not stat:
        stat = BARE_STAT
    elif not (found := _STAT.fullmatch(stat)):
        raise SweetspotError(f"bad SLO {part!r}: {_SYNTAX}")
    elif found.group(1) is not None:
        p = float(found.group(1))
        if not 0 <= p <= 100:
            raise SweetspotError(f"bad SLO {part!r}: a percentile is from 0 to 100")
        stat = f"p{percentile_word(p)}"
    return Slo(metric, stat, _milliseconds(part, value), per_request)


def _milliseconds(part: str, value: str) -> float:
    text = value.strip().lower()
    scale = 1000.0 if text.endswith("s") and not text.endswith("ms") else 1.0
    try:
        limit = float(text.removesuffix("ms").removesuffix("s")) * scale
    except ValueError:
        raise SweetspotError(f"bad SLO {part!r}: expected a time like 300ms or 2s") from None
    if not limit > 0 or limit == float("inf"):
        raise SweetspotError(f"bad SLO {part!r}: the limit must be positive and finite")
    return limit


def check_slos(slos: Slos, result: Mapping[str, Any]) -> tuple[SloCheck, ...]:
    """Each limit against a result dict (``vllm bench serve``'s keys): met when the statistic
    was measured and is within it."""
    checks = []
    for slo in slos.items:
        value = result.get(slo.key)
        measured = float(value) if isinstance(value, int | float) else None
        checks.append(SloCheck(slo, measured, measured is not None
                               and measured <= slo.limit_ms))
    return tuple(checks)
