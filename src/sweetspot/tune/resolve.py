"""What a study's settings name, loaded: the specs every trial is built from.

``resolve_study`` loads the release, the GPU, the model, the quantisation and the workload the
``StudySettings`` name, and the space and baseline with --space changes and --fix pins applied:
every varied knob made explicit in the baseline, each baseline value a point of its dimension.
``batch_estimator`` says how many requests a configuration on them runs at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.engine.releases import V1_ENGINE_SINCE, resolve_defaults
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import Quantization, load_quantization
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.settings import StudySettings
from sweetspot.tune.space import SearchSpace, _values, default_space, storage_label
from sweetspot.tune.tuner import config_from_json

__all__ = ["DRAFTS", "ResolvedStudy", "batch_estimator", "fixed_values",
           "resolve_space_and_baseline", "resolve_study"]

DRAFTS = {"Qwen2ForCausalLM": "Qwen/Qwen2.5-0.5B-Instruct"}


def fixed_values(labels: Mapping[str, str]) -> dict[str, Any]:
    """The stored ``fixed`` labels (``StudySettings.fixed``) as knob values."""
    return {k: None if label == "default" else _values(k, [label])[0]
            for k, label in labels.items()}


def resolve_space_and_baseline(settings_space: dict[str, list[str]] | None, changes: dict,
                               baseline: ServingConfig, version, hardware, arch, workload,
                               *, fixed: Mapping[str, Any] | None = None,
                               ) -> tuple[SearchSpace, ServingConfig]:
    """The space (default or stored, with the user's changes) and the baseline with every
    varied knob made explicit (vLLM's default where the baseline left it unset), each
    baseline value a point of its dimension. A ``fixed`` knob leaves the space and the
    baseline carries its value, so every trial (all start from the baseline) does too."""
    fixed = dict(fixed or {})
    if both := sorted(set(fixed) & set(changes)):
        raise SweetspotError(f"{', '.join(both)}: given to both --fix and --space (a pinned "
                             "knob is not searched)")
    if settings_space is not None:
        from sweetspot.tune.space import Dimension

        space = SearchSpace(tuple(Dimension(k, _values(k, labels))
                                  for k, labels in settings_space.items()))
    else:
        draft = DRAFTS.get(arch.architecture)
        space = default_space(version, hardware, arch, workload, draft=draft)
    space = space.with_changes({**changes, **dict.fromkeys(fixed)})
    if not space.dimensions:
        raise SweetspotError("the search space is empty: nothing to tune")
    baseline = baseline.replace(**fixed)
    resolved = resolve_defaults(baseline, version, hardware, arch.max_position_embeddings)
    explicit = {}
    dims = []
    for dim in space.dimensions:
        value = getattr(baseline, dim.knob)
        if value is None:
            value = getattr(resolved, dim.knob)
        explicit[dim.knob] = value
        if storage_label(value) not in dim.labels:
            dim = dataclasses.replace(dim, values=(value, *dim.values))
        dims.append(dim)
    if version < V1_ENGINE_SINCE and baseline.enable_chunked_prefill is None:
        # V0 chunks prefills by default only over 32K of context, and the token budget's
        # default follows: a trial with a shorter max_model_len must keep the baseline's
        # chunking, or its explicit budget would be refused (budget < max_model_len).
        explicit["enable_chunked_prefill"] = resolved.enable_chunked_prefill
    return SearchSpace(tuple(dims)), baseline.replace(**explicit)


@dataclass(frozen=True)
class ResolvedStudy:
    """What a study's settings name, loaded: the specs every trial is built from."""

    version: Any
    hardware: Any
    model: Any  # ResolvedModel: the architecture and the checkpoint's quantisation
    quant: Quantization
    workload: Any
    space: SearchSpace
    baseline: ServingConfig

    def setup(self, acceptance: float | None = None):
        from sweetspot.backends.sim import SimSetup

        return SimSetup(self.hardware, self.model.arch, self.quant, ServingConfig(),
                        self.version, spec_acceptance=acceptance)


def resolve_study(settings: StudySettings, space_changes: dict | None = None) -> ResolvedStudy:
    """Load what ``settings`` name: release, GPU, model, quantisation, workload, and the space
    and baseline with --space changes and --fix pins applied."""
    version = parse_vllm_version(settings.vllm_version)
    hardware = load_hardware(settings.gpu)
    resolved = load_model(settings.model)
    quant = (load_quantization(settings.quant) if settings.quant
             else resolved.quantization or resolved.arch.default_quantization())
    workload = validate_workload(settings.workload, "the study's workload")
    space, baseline = resolve_space_and_baseline(
        settings.space or None, space_changes or {}, config_from_json(settings.baseline),
        version, hardware, resolved.arch, workload, fixed=fixed_values(settings.fixed))
    return ResolvedStudy(version, hardware, resolved, quant, workload, space, baseline)


def batch_estimator(setup, shared_prefix_tokens: int = 0):
    """How many requests a configuration runs at once: max-num-seqs, or fewer where the KV
    cache the memory model gives it holds fewer of the workload's requests (each holding its
    prompt, less a shared prefix the prefix cache keeps once, and half its output on average).
    Sizes the capacity run; an estimate suffices."""
    from sweetspot.engine.memory import estimate_memory

    hw, arch, version = setup.hardware, setup.arch, setup.version

    def estimate(config: ServingConfig, requests) -> int:
        resolved = resolve_defaults(config, version, hw, arch.max_position_embeddings)
        seqs = int(resolved.max_num_seqs or 256)
        memory = estimate_memory(arch, setup.quant, hw, resolved, version)
        shared = shared_prefix_tokens if resolved.enable_prefix_caching else 0
        per_request = sum(r.prompt_tokens - (shared if r.prefix_group is not None else 0)
                          + r.output_tokens / 2 for r in requests) / max(1, len(requests))
        if memory.ok and memory.kv_cache_tokens > 0 and per_request > 0:
            seqs = min(seqs, int(memory.kv_cache_tokens / per_request))
        return max(1, seqs)

    return estimate
