"""Read-only accessors over the study as ``sweetspot tune`` records it (the report's only input).

The study is a ``StudyResult``: its trials, each a ``TrialResult`` with a phase, the knob it
varies (one-knob-at-a-time trials), its full config, a status and, when ok, its metrics, and its
picks, each a ``PickResult`` naming a trial. Every function here is pure and tolerant of absent
data: a study with only a baseline, a failed trial without metrics, or a pick that names a
missing trial all read as "no data", never as an error.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from sweetspot._secrets import redact_url
from sweetspot.tune.result import PickResult, StudyResult, TrialResult

BYTES_PER_GIB = 2**30
OK = "ok"
OFAT = "ofat"


def picked(study: StudyResult) -> tuple[tuple[PickResult, TrialResult], ...]:
    """Each pick whose trial exists, with that trial, in the study's goal order."""
    return tuple((pick, trial) for pick in study.picks
                 if (trial := study.trial(pick.trial)) is not None)


def trial_number(trial: TrialResult) -> int:
    """A study's trial's number (every trial a study holds is numbered; -1 if one is not)."""
    return -1 if trial.number is None else trial.number


def is_ok(trial: TrialResult | None) -> bool:
    return trial is not None and trial.status == OK


def metric(trial: TrialResult | None, name: str) -> float | None:
    """A finite numeric metric of an ok trial, else None (failed trials carry no metrics)."""
    if trial is None or not is_ok(trial):
        return None
    value = trial.metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def memory_gib(trial: TrialResult | None) -> float | None:
    value = None if trial is None else trial.memory_bytes
    return None if value is None else value / BYTES_PER_GIB


def ofat_knobs(study: StudyResult) -> tuple[str, ...]:
    """Knobs swept one at a time, in the order the study first tried them."""
    knobs: dict[str, None] = {}
    for trial in study.trials:
        if trial.phase == OFAT and trial.knob:
            knobs.setdefault(trial.knob, None)
    return tuple(knobs)


def canonical(value: Any) -> str:
    """One string per distinct config value (dict key order does not matter)."""
    return json.dumps(value, sort_keys=True)


def display_label(value: Any, knob: str | None = None) -> str:
    """How a config value reads in tables and on axes (``tune.space.storage_label`` is the text
    a study stores for it).

    ``None`` means "left at vLLM's default", except for speculative decoding where it means off.
    A speculative dict reads as its method, draft length, then any other keys (a draft model by
    the last part of its path).
    """
    if value is None:
        return "off" if knob == "speculative" else "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        rest = dict(value)
        parts = [str(rest.pop("method"))] if "method" in rest else []
        if (k := rest.pop("num_speculative_tokens", None)) is not None:
            parts.append(f"k={k}")
        for key in sorted(rest):
            shown = rest[key]
            if key == "model" and isinstance(shown, str):
                shown = shown.rstrip("/").rsplit("/", 1)[-1]
            parts.append(f"{key}={shown}")
        return " ".join(parts) or "{}"
    if isinstance(value, list | tuple):
        return ",".join(display_label(v) for v in value)
    return str(value)


KNOB_UNITS = {
    "max_model_len": "tokens",
    "max_num_batched_tokens": "tokens per step",
    "max_num_seqs": "requests",
    "gpu_memory_utilization": "share of device memory",
    "block_size": "tokens",
    "num_scheduler_steps": "steps",
    "long_prefill_token_threshold": "tokens",
    "tensor_parallel_size": "GPUs",
    "kv_offloading_bytes": "bytes",
    "kv_cache_memory_bytes": "bytes",
}


def knob_axis_label(knob: str) -> str:
    """A knob's axis title with its unit, when it has one: ``"max_model_len (tokens)"``."""
    unit = KNOB_UNITS.get(knob)
    return knob if unit is None else f"{knob} ({unit})"


def config_changes(base: Mapping[str, Any] | None, config: Mapping[str, Any]) -> tuple[
    tuple[str, Any, Any], ...
]:
    """``(knob, baseline value, this value)`` for every knob whose value differs, in config order.

    A knob missing on one side counts as unset (None), so adding or removing a flag is a change.
    """
    base = base or {}
    keys = list(config) + [k for k in base if k not in config]
    return tuple(
        (k, base.get(k), config.get(k))
        for k in keys
        if canonical(base.get(k)) != canonical(config.get(k))
    )


def changes_text(base: Mapping[str, Any] | None, config: Mapping[str, Any]) -> str:
    """``"max_num_seqs 256→512, speculative off→ngram k=3"``; empty when nothing changed."""
    return ", ".join(
        f"{k} {display_label(old, k)}→{display_label(new, k)}"
        for k, old, new in config_changes(base, config)
    )


def relative_change(value: float | None, reference: float | None) -> float | None:
    """``value / reference - 1`` (0.35 = 35 % more), None when either side is missing or zero."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference - 1.0


def redacted(study: StudyResult) -> StudyResult:
    """The study as written to disk: its storage URL hides any password."""
    return dataclasses.replace(study, storage=redact_url(study.storage))
