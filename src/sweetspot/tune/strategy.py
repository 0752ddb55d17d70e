"""What a study's strategy needs of its settings, checked before anything is loaded: by the CLI
on its options, and again by ``run_study`` on the settings it is given (a stored study, a
caller of the library). The messages name the CLI's options, as the CLI's errors do."""

from __future__ import annotations

from sweetspot._errors import SweetspotError
from sweetspot.tune.tuner import STRATEGIES

__all__ = ["ENDPOINT_ONLY_RATE", "check_strategy"]

ENDPOINT_ONLY_RATE = ("--backend endpoint measures the server at --url as it runs, so only "
                      "--strategy rate applies; a search needs servers it can launch "
                      "(--backend vllm)")


def check_strategy(backend: str, strategy: str, objective: str, *, has_slos: bool) -> None:
    """A known strategy and objective; a running endpoint takes only the rate search (a search
    needs servers it can launch); the rate search needs SLOs to meet."""
    if backend == "endpoint" and strategy != "rate":
        raise SweetspotError(ENDPOINT_ONLY_RATE)
    if strategy not in STRATEGIES:
        raise SweetspotError(f"--strategy must be one of {', '.join(STRATEGIES)}, not "
                             f"{strategy!r}")
    if objective not in ("throughput", "pareto"):
        raise SweetspotError(f"--objective must be throughput or pareto, not {objective!r}")
    if strategy == "rate" and not has_slos:
        raise SweetspotError("--strategy rate finds the highest rate that meets the SLOs: give "
                             "them with --slo, e.g. p99_ttft=2s,p99_tpot=60ms")
