"""A whole study: settings in, trials stored, picks and a confirmed winner out.

``StudySettings`` is everything that defines a study, as plain JSON: it is stored with the study,
so ``--resume`` continues with exactly what the study started with, whatever the command line
says now. ``run_study`` builds the backend, the space and the baseline from it, runs the strategy
within the budget, confirms the finalists and stores the picks; ``study_data`` reads a stored
study back as the plain dict the report and the CLI print from.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_args, redact_env, redact_url, restore_args, restore_env
from sweetspot.engine.releases import resolve_defaults
from sweetspot.engine.render import render_serve, render_yaml
from sweetspot.spec.hardware import GiB, load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import Quantization, load_quantization
from sweetspot.spec.version import parse_vllm_version
from sweetspot.spec.workload import validate_workload
from sweetspot.tune.confirm import Confirmation, confirm_finalists
from sweetspot.tune.evaluate import Evaluator, config_to_json
from sweetspot.tune.picks import (
    RESOLUTION,
    THROUGHPUT,
    Pick,
    candidates,
    changed_knobs,
    choose_picks,
    pareto_front,
    reasons_for,
)
from sweetspot.tune.rate import RateSearch, search_rate
from sweetspot.tune.space import SearchSpace, _values, config_key, default_space, storage_label
from sweetspot.tune.store import StudyExists, StudyStore
from sweetspot.tune.strategy import check_strategy
from sweetspot.tune.tuner import Budget, Tuner, config_from_json, make_sampler

__all__ = ["StudySettings", "run_study", "study_data"]

DRAFTS = {"Qwen2ForCausalLM": "Qwen/Qwen2.5-0.5B-Instruct"}
# --rate auto offers this share of the baseline's steady-state capacity: loaded enough that the
# configurations' latencies differ, light enough that the baseline's queue stays short.
AUTO_RATE_SHARE = 0.65
# Reverted configurations (a changed knob set back to the baseline's value) a study runs so that
# a pick keeps the user's value where the change buys nothing: measured trials cost a server
# start each.
SIMPLIFY_TRIALS = {"sim": 32, "measured": 4}


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
    rate: float | str | None = None  # offered req/s, "auto" (a share of the baseline's capacity)
    acceptance: float | None = None  # simulated speculative acceptance; None: per method
    fixed: dict[str, str] = field(default_factory=dict)  # knob -> value label: --fix, pinned
    # Sent with every request (--api-key, --header): used, never stored; given again on resume.
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        """What is stored (and reported): the server's secrets masked (``_secrets``); a resumed
        study takes them again from the environment (``with_secrets``)."""
        data = dataclasses.asdict(self)
        data.pop("headers", None)
        vllm = data.get("vllm") or {}
        if vllm.get("env"):
            vllm["env"] = redact_env(vllm["env"])
        if vllm.get("args"):
            vllm["args"] = redact_args(vllm["args"])
        if vllm.get("url"):
            vllm["url"] = redact_url(vllm["url"])
        return data

    def with_secrets(self) -> StudySettings:
        """Stored settings with their masked secrets taken from sweetspot's environment."""
        vllm = dict(self.vllm or {})
        if vllm.get("env"):
            vllm["env"] = restore_env(vllm["env"])
        if vllm.get("args"):
            vllm["args"] = restore_args(vllm["args"])
        return dataclasses.replace(self, vllm=vllm)

    @classmethod
    def from_dict(cls, data: dict) -> StudySettings:
        known = {f.name for f in dataclasses.fields(cls)} - {"headers"}
        if unknown := sorted(set(data) - known):
            raise SweetspotError(f"the stored study settings hold {', '.join(map(repr, unknown))}"
                                 ", which this sweetspot does not know (written by another "
                                 "version?)")
        return cls(**data)


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
    return SearchSpace(tuple(dims)), baseline.replace(**explicit)


def _backend(settings: StudySettings, setup, model_ref: str, baseline: ServingConfig):
    if settings.backend == "endpoint":
        from sweetspot.backends.endpoint import EndpointBackend

        return EndpointBackend(settings.vllm["url"], baseline,
                               model=settings.vllm.get("served_model"),
                               headers=settings.headers)
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


def run_study(settings: StudySettings, storage_url: str, *, resume: bool,
              space_changes: dict | None = None,
              on_trial: Callable[[dict, dict | None], None] | None = None,
              on_phase: Callable[[str], None] | None = None) -> dict:
    """Run (or continue) the study; returns ``study_data`` of the result."""
    check_strategy(settings.backend, settings.strategy, settings.objective,
                   has_slos=bool(settings.slos))
    study = resolve_study(settings, space_changes)
    version, resolved, quant = study.version, study.model, study.quant
    workload, space, baseline = study.workload, study.space, study.baseline
    if not resume:
        settings = dataclasses.replace(
            settings, space={d.knob: list(d.labels) for d in space.dimensions},
            baseline=config_to_json(baseline))
    setup = study.setup(settings.acceptance)
    backend = _backend(settings, setup, settings.model, baseline)
    evaluator = Evaluator(backend, workload, settings.num_requests, settings.slos,
                          vocab_size=min(resolved.arch.vocab_size, 32_000), seed=settings.seed,
                          realtime_client=bool(settings.vllm.get("realtime_client")),
                          headers=settings.headers,
                          rate=settings.rate if isinstance(settings.rate, float | int) else None,
                          batch_estimate=batch_estimator(setup, workload.prefix.length))
    directions = ("maximize", "minimize") if settings.objective == "pareto" else ("maximize",)
    joins = not resume and _joins(storage_url, settings)
    try:
        store = StudyStore.open(storage_url, settings.name, space, resume=resume or joins,
                                directions=directions,
                                sampler=make_sampler(settings.objective, settings.seed),
                                meta={"settings": settings.to_dict()})
    except StudyExists:  # another process created it a moment ago
        if resume or not _joins(storage_url, settings):
            raise
        joins = True
        store = StudyStore.open(storage_url, settings.name, space, resume=True,
                                directions=directions,
                                sampler=make_sampler(settings.objective, settings.seed))
    if settings.rate == "auto" and settings.strategy != "rate":
        _auto_rate(store, evaluator, baseline, on_phase)
    kind = "sim" if settings.backend == "sim" else "measured"
    budget = Budget(settings.trials, settings.seconds)
    # A share of the trial budget is kept for the reverted configurations (_simplify).
    reserve = min(SIMPLIFY_TRIALS[kind], (settings.trials or 0) // 5)
    tuner = Tuner(store, evaluator, space, baseline,
                  budget=dataclasses.replace(budget, trials=settings.trials - reserve)
                  if settings.trials and settings.strategy != "rate" else budget,
                  objective=settings.objective, seed=settings.seed, on_trial=on_trial,
                  count_stored=not joins)
    tuner.run(settings.strategy)
    tuner.budget = budget
    base_row = tuner.baseline_row()
    resolution = RESOLUTION[kind]
    limit = int(settings.memory_limit_gib * GiB) if settings.memory_limit_gib else None
    offered = evaluator.offered_rate
    confirmation = None
    picks: list[Pick] = []
    if settings.strategy == "rate":
        if on_phase is not None:
            on_phase("searching the highest rate that meets the SLOs")
        _goodput(store, evaluator, baseline, base_row)
    else:
        if on_phase is not None:
            on_phase("keeping your values where a change buys nothing")
        _simplify(tuner, base_row, offered, limit, resolution, settings.slos,
                  SIMPLIFY_TRIALS[kind])
        if not tuner.exhausted():  # the reserve was not all needed: search on with it
            tuner.run(settings.strategy)
            _simplify(tuner, base_row, offered, limit, resolution, settings.slos,
                      SIMPLIFY_TRIALS[kind])

        picks = choose_picks(tuner.ordered_rows(), base_row, offered, limit,
                             resolution=resolution, slos=settings.slos,
                             acceptance=_acceptance_text(settings))
        if on_phase is not None:
            on_phase("confirming finalists")
        finalists = _finalists(picks, tuner.ordered_rows(), base_row)
        confirmation = confirm_finalists(evaluator, finalists, settings.confirm_repeats)
        picks = _confirmed(picks, confirmation, base_row, tuner.ordered_rows(),
                           resolution)
    rows = tuner.ordered_rows()
    model_ref = settings.model
    store.set_attr("picks", [
        {"goal": p.goal, "trial": p.row["number"], "gain": p.gain, "reasons": list(p.reasons),
         "command": render_serve(_served(p.row, quant), model_ref, version).command(),
         "yaml": render_yaml(_served(p.row, quant), model_ref, version)}
        for p in picks])
    store.set_attr("pareto", [r["number"] for r in pareto_front(rows)])
    store.set_attr("confirmation", confirmation.to_dict() if confirmation else None)
    store.set_attr("baseline_number", base_row["number"] if base_row else None)
    store.set_attr("resolution", resolution)
    return study_data(store.study, storage_url)


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


BUDGET_KEYS = ("trials", "seconds")  # each process serving a study runs its own


def _joins(storage_url: str, settings: StudySettings) -> bool:
    """A new study's name is taken: this process serves that study beside the others when it
    was started with the same settings (budget aside); otherwise it is refused."""
    stored = StudyStore.stored_settings(storage_url, settings.name)
    if stored is None:
        return False
    given = json.loads(json.dumps(settings.to_dict()))  # as stored: tuples are lists
    differs = [k for k in sorted(set(stored) | set(given))
               if k not in BUDGET_KEYS and stored.get(k) != given.get(k)]
    if differs:
        key = differs[0]
        raise StudyExists(f"study {settings.name!r} already exists in {redact_url(storage_url)} "
                          f"with other settings ({key}: {stored.get(key)!r}, here "
                          f"{given.get(key)!r}): add --resume to continue it as it was "
                          "started, or give another --study-name")
    return True


def _auto_rate(store: StudyStore, evaluator: Evaluator, baseline: ServingConfig,
               on_phase: Callable[[str], None] | None) -> None:
    """--rate auto: the offered rate is a share of the baseline's steady-state capacity,
    measured once and stored, so a resumed study offers the same. The baseline's traffic run
    follows on the same server (one start), and that evaluation is its first trial's."""
    stored = store.study.user_attrs.get("offered_rate")
    if stored:
        evaluator.rate = float(stored)
        return
    if on_phase is not None:
        on_phase("measuring the baseline's capacity (--rate auto)")
    steady, trial = evaluator.capacity(baseline, rate_from=lambda s: round(
        AUTO_RATE_SHARE * s.request_throughput, 4) if s.request_throughput > 0 else None)
    if steady is None or steady.request_throughput <= 0:
        store.set_attr("rate_note", f"--rate auto: the baseline did not run ({trial.status}: "
                                    f"{trial.cause}); the workload's own rate is offered")
        return
    store.set_attr("offered_rate", evaluator.rate)
    store.set_attr("rate_note", f"--rate auto: {AUTO_RATE_SHARE:.0%} of the baseline's "
                                f"capacity ({steady.request_throughput:.2f} req/s)")


def _simplify(tuner: Tuner, base_row: dict | None, offered: float | None, limit: int | None,
              resolution: float, slos: dict, max_trials: int) -> None:
    """Run, for each goal's pick, the configurations with one changed knob set back to the
    baseline's value, so that a knob whose change buys nothing can keep the user's value (the
    picks prefer the fewest changes within the resolution). Rounds until nothing new is
    proposed, ``max_trials`` ran or the study's budget is spent."""
    if base_row is None:
        return
    ran = 0
    base_config = base_row["config"]
    tried: set[str] = set()
    while ran < max_trials:
        rows = tuner.ordered_rows()
        picks = choose_picks(rows, base_row, offered, limit, resolution=resolution, slos=slos)
        proposals = []
        for pick in picks:
            for knob in changed_knobs(pick.row, base_config):
                config = dict(pick.row["config"])
                if knob in base_config:
                    config[knob] = base_config[knob]
                else:
                    config.pop(knob, None)
                reverted = config_from_json(config)
                key = config_key(reverted)
                if key not in tried and key not in tuner.rows:
                    tried.add(key)
                    proposals.append(reverted)
        if not proposals:
            return
        for config in proposals[:max_trials - ran]:
            if tuner.exhausted():
                return
            tuner.evaluate(config, "simplify")
            ran += 1


def _finalists(picks: list[Pick], rows: list[dict], base_row: dict | None
               ) -> list[tuple[dict, ServingConfig]]:
    """The max-throughput pick against the baseline (is the change worth it?), or, when the
    pick is the baseline, against the runner-up."""
    best = next((p.row for p in picks if p.goal == "max-throughput"), None)
    if best is None:
        return []
    other = base_row if base_row is not None and base_row["number"] != best["number"] \
        and base_row in candidates([base_row]) else None
    if other is None:
        pool = sorted((r for r in candidates(rows) if r["number"] != best["number"]),
                      key=lambda r: -r["metrics"][THROUGHPUT])
        other = pool[0] if pool else None
    if other is None:
        return []
    return [(r, config_from_json(r["config"])) for r in (best, other)]


def _confirmed(picks: list[Pick], confirmation: Confirmation | None, base_row: dict | None,
               rows: list[dict], resolution: float) -> list[Pick]:
    """The paired verdict decides the max-throughput pick against the baseline: a tie (or a
    loss) keeps the baseline, a win says by how much."""
    if confirmation is None or base_row is None:
        return picks
    out = []
    for pick in picks:
        against_baseline = (pick.goal == "max-throughput"
                            and pick.row["number"] != base_row["number"]
                            and set(confirmation.numbers) == {pick.row["number"],
                                                              base_row["number"]})
        if against_baseline and (confirmation.verdict == "tie"
                                 or confirmation.numbers[0] == base_row["number"]):
            reasons = reasons_for(pick.goal, base_row, base_row, rows, resolution=resolution)
            pick = Pick(pick.goal, base_row, {}, (
                *reasons, f"no measurable gain from trial {pick.row['number']}'s changes: "
                          f"{confirmation.text()}"))
        elif against_baseline:
            pick = Pick(pick.goal, pick.row, pick.gain,
                        (*pick.reasons, f"confirmed: {confirmation.text()}"))
        out.append(pick)
    return out


def _acceptance_text(settings: StudySettings) -> Callable[[dict], str | None]:
    """What a speculating pick's numbers rest on: the acceptance assumed (simulated) or the
    one the server counted (measured)."""
    def describe(row: dict) -> str | None:
        facts = row.get("facts") or {}
        rate = facts.get("spec_acceptance_rate")
        if settings.backend != "sim":
            return None if rate is None else \
                f"speculation at a measured acceptance rate of {rate:.0%}"
        from sweetspot.backends.sim.speculative import DEFAULT_ACCEPTANCE

        method = (row["config"].get("speculative") or {}).get("method")
        assumed = settings.acceptance if settings.acceptance is not None \
            else DEFAULT_ACCEPTANCE.get(method, 0.6)
        source = "--acceptance" if settings.acceptance is not None else (
            f"the simulator's default for {method}; measure yours and pass --acceptance")
        text = f"speculation assumes an acceptance of {assumed:.2f} per drafted token ({source})"
        return text + (f"; simulated acceptance rate {rate:.0%}" if rate is not None else "")

    return describe


def _served(row: dict, quant: Quantization) -> ServingConfig:
    """A pick's configuration as its command must serve it: vLLM quantises a 16-bit checkpoint
    at load time only when told (``--quantization fp8``), as ``advise`` writes it; a study
    stored before its trials carried the flag gets it here."""
    config = config_from_json(row["config"])
    if config.quantization is None and quant.vllm_flag:
        return config.replace(quantization=quant.vllm_flag)
    return config


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
        "offered_rate": attrs.get("offered_rate", settings.get("rate")
                                  if isinstance(settings.get("rate"), float | int) else None),
        "rate_note": attrs.get("rate_note"), "resolution": attrs.get("resolution"),
    }

