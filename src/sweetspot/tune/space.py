"""The search space: which knobs a study varies, and over which values.

Every dimension is a finite list of values (the field guide's own method is a sweep over a few
values per knob, and a finite space makes the grid, one-knob-at-a-time and Optuna's categorical
sampler see the same configurations). The default space is the guide's seven settings as the
target release really has them — ``num_scheduler_steps`` only before 0.10.1, the scheduling
policy only when the workload has priority classes, speculation by n-gram (no draft weights)
and by a draft model where the family has one and the release runs it — plus
``max_num_batched_tokens``; values are limited to what the model and the hardware allow.

A user changes it with ``--space knob=v1,v2,…`` (replace or add a dimension), ``--space knob=``
(drop it) or a YAML file ``{knob: [v1, v2, …], other: null}``; ``--fix knob=value`` pins a knob
for the whole study (``parse_fix_items``: the baseline and every trial carry the value, and the
knob leaves the space).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.engine.releases import DRAFT_MODEL_SINCE, NUM_SCHEDULER_STEPS_REMOVED
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.knobs import KNOBS, ServingConfig, SpeculativeConfig, _parse_value, knob
from sweetspot.spec.model import ModelArch
from sweetspot.spec.workload import WorkloadSpec, workload_stats

__all__ = ["Dimension", "SearchSpace", "config_key", "default_space", "storage_label"]

MODEL_LEN_MARGIN = 1.2


def storage_label(value: Any) -> str:
    """A stable text for one value, as a study stores it: Optuna's categorical choices, --fix
    pins, configuration keys (``report.study.display_label`` is how a value reads in a table)."""
    if value is None:
        return "default"
    if isinstance(value, SpeculativeConfig):
        return value.to_json()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def config_key(config: ServingConfig) -> str:
    """Identity of a configuration: its explicit settings, sorted."""
    return json.dumps({k: storage_label(v) for k, v in sorted(config.explicit().items())})


@dataclass(frozen=True, slots=True)
class Dimension:
    knob: str  # ServingConfig field
    values: tuple[Any, ...]  # in sweep order; None = vLLM's default

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(storage_label(v) for v in self.values)

    def value_of(self, label: str) -> Any:
        return self.values[self.labels.index(label)]


@dataclass(frozen=True, slots=True)
class SearchSpace:
    dimensions: tuple[Dimension, ...]

    @property
    def size(self) -> int:
        return math.prod(len(d.values) for d in self.dimensions)

    def dimension(self, name: str) -> Dimension:
        for d in self.dimensions:
            if d.knob == name:
                return d
        raise KeyError(name)

    def apply(self, base: ServingConfig, labels: Mapping[str, str]) -> ServingConfig:
        """``base`` with the dimension values named by ``labels`` (knob -> value label)."""
        return base.replace(**{name: self.dimension(name).value_of(label)
                               for name, label in labels.items()})

    def labels_of(self, config: ServingConfig) -> dict[str, str]:
        return {d.knob: storage_label(getattr(config, d.knob)) for d in self.dimensions}

    def with_changes(self, changes: Mapping[str, Sequence[Any] | None]) -> SearchSpace:
        """Replace, add (``values``) or drop (``None``) dimensions."""
        dims = {d.knob: d for d in self.dimensions}
        for name, values in changes.items():
            if values is None:
                dims.pop(name, None)
            else:
                dims[name] = Dimension(name, tuple(values))
        return SearchSpace(tuple(dims.values()))


def default_space(version: Version, hardware: Hardware, arch: ModelArch,
                  workload: WorkloadSpec, draft: str | None = None) -> SearchSpace:
    """The guide's seven settings that ``version`` has, plus the step's token budget: each at
    its knob's sweep values, but the model length (from the workload's longest requests) and
    speculation (n-gram, and a draft model where the release and the model have one)."""
    stats = workload_stats(workload, 2000)
    need = math.ceil(stats.total.p99 * MODEL_LEN_MARGIN / 1024) * 1024
    limit = arch.max_position_embeddings
    lens = sorted({min(v, limit) for v in (need, 2 * need, 4 * need, 8192, 32768) if v >= need})
    dims = [
        _swept("max_num_seqs"),
        Dimension("max_model_len", tuple(v for v in lens if v <= limit)[:4]),
    ]
    if not hardware.is_cpu:
        dims.append(_swept("gpu_memory_utilization"))
    dims.append(_swept("enable_prefix_caching"))
    if workload.priorities:
        dims.append(_swept("scheduling_policy"))
    if version < NUM_SCHEDULER_STEPS_REMOVED:
        dims.append(_swept("num_scheduler_steps"))
    speculation: list[Any] = [None, SpeculativeConfig("ngram", 3, prompt_lookup_max=4,
                                                      prompt_lookup_min=2)]
    if draft is not None and version >= DRAFT_MODEL_SINCE:
        speculation.append(SpeculativeConfig("draft_model", 4, model=draft))
    dims.append(Dimension("speculative", tuple(speculation)))
    dims.append(_swept("max_num_batched_tokens"))
    return SearchSpace(tuple(dims))


def _swept(name: str) -> Dimension:
    """A knob's dimension at the values its ``Knob.sweep`` lists (the one place they live)."""
    return Dimension(name, KNOBS[name].sweep)


def parse_space_items(items: Iterable[str]) -> dict[str, tuple[Any, ...] | None]:
    """``["max_num_seqs=64,128", "speculative="]`` -> changes for ``with_changes``."""
    changes: dict[str, tuple[Any, ...] | None] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise SweetspotError(f"bad --space {item!r}: expected knob=v1,v2,... (or knob= to "
                                 "drop it)")
        k = knob(name)
        if not raw.strip():
            changes[k.name] = None
            continue
        parts = [raw] if k.kind == "speculative" else raw.split(",")
        changes[k.name] = _values(k.name, parts)
    return changes


def parse_fix_items(items: Iterable[str]) -> dict[str, Any]:
    """``["max_model_len=4096", "enable_prefix_caching=true"]`` -> knob -> value, each value
    parsed and checked as ``--space`` does (``default`` pins vLLM's own default)."""
    fixed: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip() or not raw.strip():
            raise SweetspotError(f"bad --fix {item!r}: expected knob=value")
        k = knob(name)
        if k.kind != "speculative" and "," in raw:
            raise SweetspotError(f"bad --fix {item!r}: one value pins a knob; a range of "
                                 "values is --space")
        (value,) = _values(k.name, [raw])
        if k.name in fixed and storage_label(fixed[k.name]) != storage_label(value):
            raise SweetspotError(f"--fix gives {k.name} twice: {storage_label(fixed[k.name])} "
                                 f"and {storage_label(value)}")
        fixed[k.name] = value
    return fixed


def load_space_file(path: Path) -> dict[str, tuple[Any, ...] | None]:
    """A YAML mapping knob -> list of values (or null to drop the knob)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SweetspotError(f"cannot read the space file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SweetspotError(f"{path}: expected a mapping knob -> list of values")
    changes: dict[str, tuple[Any, ...] | None] = {}
    for name, values in data.items():
        k = knob(str(name))
        if values is None:
            changes[k.name] = None
            continue
        if not isinstance(values, list):
            values = [values]
        texts = [json.dumps(v) if isinstance(v, dict) else
                 ("none" if v is None else str(v).lower() if isinstance(v, bool) else str(v))
                 for v in values]
        changes[k.name] = _values(k.name, texts)
    return changes


def _values(name: str, texts: Sequence[str]) -> tuple[Any, ...]:
    k = KNOBS[name]
    values = []
    for text in texts:
        if not text.strip():
            raise SweetspotError(f"empty value in the range of {name}")
        value = _parse_value(k, text)
        if (reason := k.check(value)) is not None:
            raise SweetspotError(reason)
        if storage_label(value) not in (storage_label(v) for v in values):
            values.append(value)
    if not values:
        raise SweetspotError(f"empty range for {name}")
    return tuple(values)
