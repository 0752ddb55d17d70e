"""Drift: is the live traffic still the traffic the pick was tuned for?

The tuned workload's P50 and P90 prompt and output lengths (``workload_stats`` of the spec the
study or bench result kept) and its rate are held against each window's fitted lengths
(``guard.lengths``) and arrival rate. A length quantile that moved by ``DRIFT_FACTOR`` either
way, or arrivals beyond ``DRIFT_FACTOR`` times the tuned rate, is drift: the pick was chosen for
other traffic, and ``live_workload`` writes the traffic the server really sees as a workload
spec that ``sweetspot tune --workload`` takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.guard.baseline import Envelope
from sweetspot.guard.checks import Alert
from sweetspot.guard.lengths import LengthFit, fit_lengths
from sweetspot.guard.window import Window
from sweetspot.metrics.prometheus import Histogram

__all__ = ["DRIFT_FACTOR", "TunedTraffic", "check_drift", "live_workload", "tuned_traffic",
           "write_workload"]

DRIFT_FACTOR = 1.5  # a length quantile or rate this many times the tuned one (or 1/x) drifted
MIN_REQUESTS = 10  # finished requests a window needs before its lengths are judged


@dataclass(frozen=True, slots=True)
class TunedTraffic:
    """What the pick was tuned on."""

    name: str  # the workload's name
    prompt_p50: float  # tokens, shared prefix included (as vLLM counts a prompt)
    prompt_p90: float
    output_p50: float
    output_p90: float
    rate: float | None  # req/s offered when tuned (None: closed loop or unknown)


def tuned_traffic(envelope: Envelope | None) -> TunedTraffic | None:
    """The envelope's workload as length quantiles and a rate (None when it kept none)."""
    if envelope is None or not envelope.workload:
        return None
    from sweetspot.spec.workload import validate_workload, workload_stats

    spec = validate_workload(dict(envelope.workload), f"of the baseline {envelope.source}")
    stats = workload_stats(spec)
    return TunedTraffic(spec.name, stats.prompt.p50, stats.prompt.p90, stats.output.p50,
                        stats.output.p90, envelope.offered_rate or stats.arrival_rate)


def _moved(live: float, tuned: float) -> bool:
    return tuned > 0 and not 1 / DRIFT_FACTOR < live / tuned < DRIFT_FACTOR


def check_drift(window: Window, tuned: TunedTraffic | None) -> list[Alert]:
    """Where ``window``'s traffic left the tuned workload's."""
    if tuned is None or window.state in ("server down", "restarted"):
        return []
    alerts = []
    for what, fit, p50, p90 in (
            ("prompt", window.prompt_lengths, tuned.prompt_p50, tuned.prompt_p90),
            ("output", window.output_lengths, tuned.output_p50, tuned.output_p90)):
        if fit is None or fit.count < MIN_REQUESTS:
            continue
        for name, live, was in (("P50", fit.p50, p50), ("P90", fit.p90, p90)):
            if _moved(live, was):
                alerts.append(Alert("drift", "warning",
                                    f"{name} {what} length {live:,.0f} tokens, {live / was:.1f}x "
                                    f"the {was:,.0f} tuned on ({tuned.name})", live, was))
    rate = window.arrival_rate
    if tuned.rate and rate is not None and (window.requests or 0) >= MIN_REQUESTS \
            and rate > DRIFT_FACTOR * tuned.rate:
        alerts.append(Alert("drift", "warning", f"{rate:.2f} req/s arriving, "
                                                f"{rate / tuned.rate:.1f}x the {tuned.rate:g} "
                                                "tuned for", rate, tuned.rate))
    return alerts


def _length(fit: LengthFit) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": "lognormal", "median": round(fit.median, 1),
                            "sigma": round(fit.sigma, 4), "min": fit.low}
    if fit.high is not None:
        data["max"] = max(fit.high, fit.low)
    return data


def live_workload(prompt: Histogram | None, output: Histogram | None, rate: float | None,
                  source: str) -> dict[str, Any] | None:
    """A workload spec (plain data) fitted to the lengths counted in ``prompt`` and
    ``output`` (vLLM's token-count histograms) arriving at ``rate`` req/s (Poisson); None until
    both have observations."""
    prompt_fit = fit_lengths(prompt.buckets, prompt.sum, prompt.count) if prompt else None
    output_fit = fit_lengths(output.buckets, output.sum, output.count) if output else None
    if prompt_fit is None or output_fit is None:
        return None
    arrival: dict[str, Any] = {"process": "poisson"}
    if rate:
        arrival["rate"] = round(rate, 4)
    return {
        "name": "live",
        "description": f"fitted to {prompt_fit.count} requests served by {source} (lognormal "
                       "lengths from vLLM's token-count histograms; prompts include any shared "
                       "prefix)",
        "prompt": _length(prompt_fit), "output": _length(output_fit), "arrival": arrival,
    }


def write_workload(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as YAML after checking ``tune --workload`` would take it."""
    import yaml

    from sweetspot._files import write_text
    from sweetspot.spec.workload import validate_workload

    validate_workload(dict(data), f"fitted for {path}")
    try:
        write_text(path, yaml.safe_dump(dict(data), sort_keys=False))
    except OSError as exc:
        raise SweetspotError(f"cannot write {path}: {exc.strerror or exc}") from None
