"""A whole study: settings in, trials stored, picks and a confirmed winner out.

``StudySettings`` is everything that defines a study, as plain JSON: it is stored with the study,
so ``--resume`` continues with exactly what the study started with, whatever the command line
says now. ``run_study`` builds the backend, the space and the baseline from it, runs the strategy
within the budget, confirms the finalists and stores the picks; ``study_data`` reads a stored
study back as the plain dict the report and the CLI print from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.engine.render import render_serve, render_yaml
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.knobs import ServingConfig, resolve_defaults
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.confirm import confirm_finalists
from sweetspot.tune.evaluate import Evaluator, config_to_json
from sweetspot.tune.picks import THROUGHPUT, candidates, choose_picks, pareto_front
from sweetspot.tune.rate import RateSearch, search_rate
from sweetspot.tune.space import SearchSpace, _values, default_space, value_label
from sweetspot.tune.store import StudyStore
from sweetspot.tune.tuner import STRATEGIES, Budget, Tuner, config_from_json, make_sampler

__all__ = ["StudySettings", "run_study", "study_data"]

ENDPOINT_ONLY_RATE = ("--backend endpoint measures the server at --url as it runs, so only "
                       "--strategy rate applies; a search needs servers it can launch "
                       "(--backend vllm)")
DRAFTS = {"Qwen2ForCausalLM": "Qwen/Qwen2.5-0.5B-Instruct"}


@dataclass(frozen=True)
class StudySettings:
    name: str
    model: str  # catalog name, HF id or folder (what `vllm serve` gets)
    gpu: str
    quant: str | None
    vllm_version: str
    workload: dict  # workload_to_dict form
    num_requests: int
    slos: dict[str, float]
    space: dict[str, list[str]]  # knob -> value labels, in order
    baseline: dict  # ServingConfig as JSON, explicit settings
    strategy: str = "auto"
    objective: str = "throughput"  # or "pareto"
    trials: int | None = 60
    seconds: float | None = None
    seed: int = 0
    confirm_repeats: int = 3
    memory_limit_gib: float | None = None
    backend: str = "sim"  # "sim", "vllm" or "endpoint" (vllm["url"]: a running server)
    vllm: dict = field(default_factory=dict)  # real backend: python, template, env, tokenizer...
    calibration: str | None = None
    fixed: dict[str, str] = field(default_factory=dict)  # knob -> value label: --fix, pinned

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StudySettings:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
        if value_label(value) not in dim.labels:
            dim = dataclasses.replace(dim, values=(value, *dim.values))
        dims.append(dim)
    return SearchSpace(tuple(dims)), baseline.replace(**explicit)


def _backend(settings: StudySettings, setup, model_ref: str, baseline: ServingConfig):
    if settings.backend == "endpoint":
        from sweetspot.backends.endpoint import EndpointBackend

        return EndpointBackend(settings.vllm["url"], baseline,
                               model=settings.vllm.get("served_model"))
    if settings.backend == "sim":
        from sweetspot.backends.sim.backend import SimBackend

        step_model = None
        if settings.calibration:
            from sweetspot.backends.sim.calibration import load_calibration

            step_model = load_calibration(Path(settings.calibration), setup.hardware,
                                          setup.arch).step_model
        return SimBackend(setup, step_model, seed=settings.seed)
    from sweetspot.backends.vllm import VllmBackend

    v = settings.vllm
    version = parse_vllm_version(settings.vllm_version) if v.get("template") else None
    return VllmBackend(model_ref, trials_dir=Path(v.get("trials_dir", ".sweetspot/trials")),
                       tokenizer_dir=v.get("tokenizer"), python=v.get("python"),
                       template=v.get("template"), vllm_version=version,
                       hardware=setup.hardware, env=v.get("env") or {},
                       extra_args=v.get("args") or (),
                       startup_timeout_s=v.get("startup_timeout_s", 600.0),
                       run_timeout_s=v.get("run_timeout_s"))


def run_study(settings: StudySettings, storage_url: str, *, resume: bool,
              space_changes: dict | None = None,
              on_trial: Callable[[dict, dict | None], None] | None = None,
              on_phase: Callable[[str], None] | None = None) -> dict:
    """Run (or continue) the study; returns ``study_data`` of the result."""
    from sweetspot.backends.sim import SimSetup

    if settings.strategy not in STRATEGIES:
        raise SweetspotError(f"unknown strategy {settings.strategy!r}; known: "
                             f"{', '.join(STRATEGIES)}")
    if settings.objective not in ("throughput", "pareto"):
        raise SweetspotError(f"unknown objective {settings.objective!r}: throughput or pareto")
    if settings.backend == "endpoint" and settings.strategy != "rate":
        raise SweetspotError(ENDPOINT_ONLY_RATE)
    if settings.strategy == "rate" and not settings.slos:
        raise SweetspotError("the rate strategy finds the highest rate that meets the SLOs: "
                             "give them with --slo, e.g. p99_ttft=2s,p99_tpot=60ms")
    version = parse_vllm_version(settings.vllm_version)
    hardware = load_hardware(settings.gpu)
    resolved = load_model(settings.model)
    quant = (load_quantization(settings.quant) if settings.quant
             else resolved.quantization or resolved.arch.default_quantization())
    workload = validate_workload(settings.workload, "the study's workload")
    baseline = config_from_json(settings.baseline)
    space, baseline = resolve_space_and_baseline(
        settings.space or None, space_changes or {}, baseline, version, hardware,
        resolved.arch, workload, fixed=fixed_values(settings.fixed))
    if not resume:
        settings = dataclasses.replace(
            settings, space={d.knob: list(d.labels) for d in space.dimensions},
            baseline=config_to_json(baseline))
    setup = SimSetup(hardware, resolved.arch, quant, ServingConfig(), version)
    backend = _backend(settings, setup, settings.model, baseline)
    evaluator = Evaluator(backend, workload, settings.num_requests, settings.slos,
                          vocab_size=min(resolved.arch.vocab_size, 32_000), seed=settings.seed,
                          realtime_client=bool(settings.vllm.get("realtime_client")))
    directions = ("maximize", "minimize") if settings.objective == "pareto" else ("maximize",)
    store = StudyStore.open(storage_url, settings.name, space, resume=resume,
                            directions=directions,
                            sampler=make_sampler(settings.objective, settings.seed),
                            meta={"settings": settings.to_dict()})
    tuner = Tuner(store, evaluator, space, baseline,
                  budget=Budget(settings.trials, settings.seconds),
                  objective=settings.objective, seed=settings.seed, on_trial=on_trial)
    tuner.run(settings.strategy)
    rows = tuner.ordered_rows()
    base_row = tuner.baseline_row()
    confirmation = None
    if settings.strategy == "rate":
        if on_phase is not None:
            on_phase("searching the highest rate that meets the SLOs")
        _goodput(store, evaluator, baseline, base_row)
    else:
        if on_phase is not None:
            on_phase("confirming finalists")
        pool = sorted(candidates(rows), key=lambda r: -r["metrics"][THROUGHPUT])
        finalists = [(r, config_from_json(r["config"])) for r in pool[:2]]
        confirmation = confirm_finalists(evaluator, finalists, settings.confirm_repeats)
    offered = workload.arrival.rate if workload.arrival.process not in ("inf", "closed") \
        else None
    limit = int(settings.memory_limit_gib * GiB) if settings.memory_limit_gib else None
    picks = choose_picks(rows, base_row, offered, limit)
    model_ref = settings.model
    store.set_attr("picks", [
        {"goal": p.goal, "trial": p.row["number"], "gain": p.gain, "reasons": list(p.reasons),
         "command": render_serve(config_from_json(p.row["config"]), model_ref,
                                 version).command(),
         "yaml": render_yaml(config_from_json(p.row["config"]), model_ref, version)}
        for p in picks])
    store.set_attr("pareto", [r["number"] for r in pareto_front(rows)])
    store.set_attr("confirmation", confirmation.to_dict() if confirmation else None)
    store.set_attr("baseline_number", base_row["number"] if base_row else None)
    return study_data(store.study, storage_url)


def _goodput(store: StudyStore, evaluator: Evaluator, config: ServingConfig,
             row: dict | None) -> None:
    """The rate search for ``config`` (the baseline), its state stored after every ladder so
    a resumed study continues it."""
    if row is None or row["status"] != "ok" or not row["metrics"]:
        cause = "it did not run" if row is None else f"it failed ({row['status']}: " \
                                                        f"{row['cause']})"
        store.set_attr("rate_search", {"trial": row and row["number"],
                                       "error": f"no rate search: {cause}"})
        return
    stored = store.study.user_attrs.get("rate_search")
    state = None
    if stored and "error" not in stored and stored.get("trial") == row["number"]:
        state = RateSearch.from_dict(stored)
    search_rate(evaluator, config, row, state,
                on_round=lambda s: store.set_attr("rate_search", s.to_dict()))


def study_data(study, storage_url: str) -> dict:
    """A stored study as the report's plain dict (see ``report``)."""
    attrs = study.user_attrs
    settings = attrs.get("settings", {})
    rows = StudyStore(study, SearchSpace(()), ()).rows()
    rows.sort(key=lambda r: r["number"])
    return {
        "study": study.study_name, "storage": storage_url,
        "model": settings.get("model"), "gpu": settings.get("gpu"),
        "vllm_version": settings.get("vllm_version"),
        "workload": (settings.get("workload") or {}).get("name"),
        "backend": settings.get("backend"), "objective": settings.get("objective"),
        "slos": settings.get("slos", {}), "baseline": attrs.get("baseline_number"),
        "trials": rows, "picks": attrs.get("picks", []), "pareto": attrs.get("pareto", []),
        "confirmation": attrs.get("confirmation"), "settings": settings,
        "rate_search": attrs.get("rate_search"),
    }

