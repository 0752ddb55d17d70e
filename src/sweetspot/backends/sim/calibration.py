"""Calibration files: a fitted ``LinearStepModel`` for one hardware + model, and the measured
runs it was fitted on (``sweetspot bench --json`` results) turned into ``Observation``s. The
built-in profile's design lives here; running it against a server is ``tune.calibrate``.

A calibration only describes the hardware and model it was measured on: loading it for another
model (compared by architecture, not by name, so a local folder and its catalog twin match) or
another hardware entry is an error.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, ValidationError, model_validator

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.backends.sim.cost import LINEAR_FEATURES, LinearStepModel
from sweetspot.backends.sim.fit import FIT_METRICS, Observation
from sweetspot.metrics.run import bunched_streams
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import ModelArch, model_fingerprint
from sweetspot.spec.requests import Request, sample_requests
from sweetspot.spec.workload import validate_workload

__all__ = ["Calibration", "load_calibration", "model_fingerprint", "observation_from_bench",
           "observation_from_result", "profile_poisson_rate", "save_calibration"]

FORMAT = "sweetspot-calibration/1"
class Calibration(BaseModel):
    """A calibration file as written and read: its fields are the file's keys, checked on load
    (extra keys, a wrong format or feature list, negative coefficients are errors)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["sweetspot-calibration/1"] = FORMAT
    hardware: str
    model: str
    fingerprint: dict[str, int]
    vllm_version: str = ""
    features: tuple[str, ...] = LINEAR_FEATURES
    coefficients_s: tuple[NonNegativeFloat, ...]
    request_latency_s: float
    fitted_on: tuple[dict[str, Any], ...] = ()  # per statistic: run, metric, measured, predicted
    # The largest steps the fitted runs simulated ("max_batch", "max_step_tokens"): beyond
    # them the coefficients extrapolate (older files have none).
    covered: dict[str, float] = {}

    @model_validator(mode="after")
    def _one_coefficient_per_feature(self) -> Calibration:
        if self.features != LINEAR_FEATURES or len(self.coefficients_s) != len(LINEAR_FEATURES):
            raise ValueError(f"expected the features {list(LINEAR_FEATURES)} and one "
                             "coefficient each")
        return self

    @property
    def step_model(self) -> LinearStepModel:
        return LinearStepModel(self.coefficients_s, self.request_latency_s)

    @classmethod
    def of(cls, hardware: Hardware, arch: ModelArch, version: object, step_model: LinearStepModel,
           fitted_on: Sequence[Mapping[str, Any]],
           covered: Mapping[str, float] | None = None) -> Calibration:
        """The calibration of ``step_model``, fitted on ``fitted_on`` for this hardware, model
        and vLLM release."""
        return cls(hardware=hardware.name, model=arch.name, fingerprint=model_fingerprint(arch),
                   vllm_version=str(version), coefficients_s=step_model.coefficients,
                   request_latency_s=step_model.request_latency_s,
                   fitted_on=tuple(dict(row) for row in fitted_on),
                   covered=dict(covered or {}))


def save_calibration(path: Path, calibration: Calibration) -> None:
    try:
        write_text(path, calibration.model_dump_json(indent=2) + "\n")
    except OSError as exc:
        raise SweetspotError(f"cannot write {path}: {exc}") from None


def load_calibration(path: Path, hardware: Hardware, arch: ModelArch) -> Calibration:
    """Read a calibration file and check it describes ``hardware`` and ``arch``."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SweetspotError(f"cannot read calibration {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SweetspotError(f"cannot read calibration {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SweetspotError(f"{path} is not a sweetspot calibration file ({FORMAT})")
    try:
        cal = Calibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise SweetspotError(f"malformed calibration {path}: {where}: {first['msg']}") from None
    if cal.fingerprint != model_fingerprint(arch):
        raise SweetspotError(f"calibration {path} was measured on model {cal.model!r}, not on "
                             f"{arch.name!r} (a different architecture)")
    if cal.hardware != hardware.name:
        raise SweetspotError(f"calibration {path} was measured on {cal.hardware!r}, not on "
                             f"{hardware.name!r}")
    return cal


def observation_from_bench(data: Mapping[str, Any], label: str) -> Observation:
    """A ``sweetspot bench --json`` result as a fitting observation: its requests are drawn again
    from the workload spec, seed and vocabulary the result records."""
    meta = data.get("sweetspot") if isinstance(data, Mapping) else None
    if not isinstance(meta, Mapping) or "workload_spec" not in meta:
        raise SweetspotError(f"{label}: not a result of `sweetspot bench --json` with its "
                             "workload (rerun the benchmark with this version of sweetspot)")
    try:
        spec = validate_workload(dict(meta["workload_spec"]), label)
        requests = tuple(sample_requests(spec, int(meta["num_requests"]),
                                         seed=int(meta["seed"]),
                                         vocab_size=int(meta["vocab_size"])))
    except (KeyError, TypeError, ValueError) as exc:
        raise SweetspotError(f"{label}: malformed bench result: {exc}") from None
    return observation_from_result(data, label, requests, meta.get("max_concurrency"),
                                   spec.arrival.process)


def observation_from_result(data: Mapping[str, Any], label: str, requests: Sequence[Request],
                            max_concurrency: int | None, arrival_process: str,
                            config: ServingConfig | None = None) -> Observation:
    """A measured run's result (``bench --json``'s keys) as a fitting observation, given the
    requests it sent and how it sent them (``arrival_process``: the workload's)."""
    try:
        measured = {k: float(data[k]) for k in FIT_METRICS if k in data}
    except (TypeError, ValueError) as exc:
        raise SweetspotError(f"{label}: malformed bench result: {exc}") from None
    if int(data.get("failed", 0)):
        raise SweetspotError(f"{label}: {data['failed']} requests failed in that run; "
                             "calibrate on clean runs")
    if bunched_streams(data):  # token times are the client's or API server's, not the steps'
        for key in ("mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms"):
            measured.pop(key, None)
        if arrival_process == "closed":  # the loop waited for late chunks: so did its
            measured.pop("duration", None)  # server, and the duration is the client's too
    saturated = arrival_process in ("inf", "closed")
    return Observation(label, tuple(requests), max_concurrency, measured, saturated, config)


# The built-in profile: batch sizes from 1 to saturation, and one open-loop rate in between.
PROFILE_WORKLOAD = {
    "name": "calibration-profile",
    "prompt": {"kind": "uniform", "low": 64, "high": 512},
    "output": {"kind": "uniform", "low": 32, "high": 160},
}


# The batch runs are measured more than once a round: they are the shortest runs (a rate-inf run
# of 48 requests lasts ~1 s on a CPU build), so one slow moment of the host decides them, and
# they are the ones that set the fitted cost of large batches. On the H200 a single slow
# rate-inf profile run put max-num-seqs 64 21 % under its measurement; three a round and two
# closed loops of 16 brought every rate-inf cell within 9.2 % (benchmarks/RESULTS.md).
BATCH_REPEATS = {"closed16": 2, "inf": 3}


def profile_poisson_rate(inf_request_rates: Iterable[float]) -> float:
    """The profile's Poisson rate: half the median request rate its rate-inf runs reached."""
    return max(0.1, statistics.median(inf_request_rates) / 2)
