"""A whole study: settings in, trials stored, picks and a confirmed winner out.

``run_study`` loads what the ``StudySettings`` name (``tune.settings``: stored with the study, so
``--resume`` continues with exactly what it started with; ``tune.resolve``), builds the backend,
opens the store, runs the strategy within the budget, makes the picks final (``tune.finalize``:
the reverted configurations, the finalists confirmed) and stores them; ``study_data`` reads a
stored study back as the plain dict the report and the CLI print from.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from sweetspot._secrets import redact_url
from sweetspot.engine.render import render_serve, render_yaml
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.quant import Quantization
from sweetspot.tune.confirm import Confirmation
from sweetspot.tune.evaluate import Evaluator, config_to_json
from sweetspot.tune.executors import Execution, Executor, open_executor
from sweetspot.tune.finalize import SIMPLIFY_TRIALS, finalize_picks
from sweetspot.tune.picks import RESOLUTION, Pick, pareto_front
from sweetspot.tune.rate import RateSearch, search_rate
from sweetspot.tune.resolve import ResolvedStudy, batch_estimator, resolve_study
from sweetspot.tune.result import StudyResult, TrialResult
from sweetspot.tune.settings import StudySettings
from sweetspot.tune.space import SearchSpace
from sweetspot.tune.store import StudyExists, StudyStore
from sweetspot.tune.strategy import check_strategy
from sweetspot.tune.tuner import Budget, Tuner, config_from_json, make_sampler
from sweetspot.tune.worker import claim, serve_budget

# StudySettings lives in tune.settings and resolve_study in tune.resolve: the CLI imports them
# from here, beside run_study.
__all__ = ["AUTO_RATE_SHARE", "StudySettings", "run_study", "study_data", "study_evaluator"]

# --rate auto offers this share of the baseline's steady-state capacity: loaded enough that the
# configurations' latencies differ, light enough that the baseline's queue stays short.
AUTO_RATE_SHARE = 0.65


def _backend(settings: StudySettings, setup, model_ref: str, baseline: ServingConfig):
    """The settings' backend from the registry (``backends.base.BACKENDS``)."""
    from sweetspot.backends.base import Target, backend_for

    return backend_for(settings.backend, Target(
        setup, model_ref, baseline, options=settings.vllm, vllm_version=settings.vllm_version,
        seed=settings.seed, calibration=settings.calibration, headers=settings.headers))


def run_study(settings: StudySettings, storage_url: str, *, resume: bool,
              space_changes: dict | None = None,
              on_trial: Callable[[TrialResult, TrialResult | None], None] | None = None,
              on_phase: Callable[[str], None] | None = None,
              execution: Execution | None = None, worker: bool = False) -> StudyResult:
    """Run (or continue) the study; returns ``study_data`` of the result.

    In phases: check the settings and load what they name; open the store (a new study, a
    resumed one, or one that other processes serve with the same settings); measure the
    baseline's capacity for --rate auto; search within the budget, less a reserve; then either
    the baseline's rate search (--strategy rate) or the picks, simplified and confirmed; last,
    store the outcome beside the trials. A ``worker`` (``tune.worker``) spends the study's
    budget with the other processes serving it, and only the last one makes the outcome."""
    _check(settings)
    study = resolve_study(settings, space_changes)
    if not resume:  # a new study stores the space and baseline it resolved to
        settings = dataclasses.replace(
            settings, space={d.knob: list(d.labels) for d in study.space.dimensions},
            baseline=config_to_json(study.baseline))
    evaluator = _evaluator(settings, study)
    store, joins = _open(storage_url, settings, study.space, resume=resume)
    if settings.rate == "auto" and settings.strategy != "rate":
        _auto_rate(store, evaluator, study.baseline, on_phase)
    kind = "sim" if settings.backend == "sim" else "measured"
    execution = execution or Execution()
    with open_executor(execution, settings, evaluator) as executor:
        tuner = _search(settings, store, evaluator, study, kind, count_stored=not joins,
                        on_trial=on_trial, executor=executor,
                        in_flight=execution.trials_in_flight, worker=worker)
        if (searched := getattr(executor, "searched", None)) is not None:
            searched()  # --emulate-gpus: the search's makespan, apart from the finish
        if worker and not claim(store):  # another worker makes the outcome
            return study_data(store.study, storage_url)
        base_row = tuner.baseline_row()
        confirmation = None
        picks: list[Pick] = []
        if settings.strategy == "rate":
            if on_phase is not None:
                on_phase("searching the highest rate that meets the SLOs")
            _goodput(store, evaluator, study.baseline, base_row)
        else:
            picks, confirmation = finalize_picks(settings, tuner, evaluator, base_row, kind,
                                                 on_phase)
        summary = getattr(executor, "summary", None)  # --emulate-gpus' makespan
        if summary is not None and (planned := summary()) is not None:
            store.set_attr("emulation", planned)
    _store_outcome(store, settings, study, tuner.ordered_rows(), picks, confirmation, base_row,
                   RESOLUTION[kind])
    return study_data(store.study, storage_url)


def _check(settings: StudySettings) -> None:
    """Refuse settings that no study runs with (the CLI asks the same before loading)."""
    check_strategy(settings.backend, settings.strategy, settings.objective,
                   has_slos=bool(settings.slos))


def study_evaluator(settings: StudySettings) -> Evaluator:
    """The evaluator a study with ``settings`` runs its trials with (``compare`` runs its pairs
    with it: the same backend, workload, requests and figures as a tune trial)."""
    return _evaluator(settings, resolve_study(settings))


def _evaluator(settings: StudySettings, study: ResolvedStudy) -> Evaluator:
    """The study's trials' evaluator, on the settings' backend."""
    setup = study.setup(settings.acceptance)
    backend = _backend(settings, setup, settings.model, study.baseline)
    workload = study.workload
    return Evaluator(backend, workload, settings.num_requests, settings.slos,
                     vocab_size=min(study.model.arch.vocab_size, 32_000), seed=settings.seed,
                     realtime_client=bool(settings.vllm.get("realtime_client")),
                     headers=settings.headers,
                     rate=settings.rate if isinstance(settings.rate, float | int) else None,
                     batch_estimate=batch_estimator(setup, workload.prefix.length))


def _open(storage_url: str, settings: StudySettings, space: SearchSpace, *, resume: bool
          ) -> tuple[StudyStore, bool]:
    """The study's store, created or resumed, and whether this process joins a new study that
    others serve with the same settings (``_joins``): it does not count their trials."""
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
    return store, joins


def _search(settings: StudySettings, store: StudyStore, evaluator: Evaluator,
            study: ResolvedStudy, kind: str, *, count_stored: bool,
            on_trial: Callable[[dict, dict | None], None] | None,
            executor: Executor | None = None, in_flight: int = 1,
            worker: bool = False) -> Tuner:
    """The strategy's search, run: the tuner it leaves has the whole budget again, the share
    of its trials kept for the reverted configurations (``tune.finalize``) unspent."""
    budget = Budget(settings.trials, settings.seconds)
    reserve = min(SIMPLIFY_TRIALS[kind], (settings.trials or 0) // 5)
    if settings.strategy == "grid":
        # A grid's reverted configurations are points of the grid: it spends its whole budget
        # on the grid (a covered grid ran them all). A reserve would put a barrier (the search's
        # last trial) before the budget's last trials, and reverted ones need the baseline's
        # row, which the grid's random order reaches late or not at all.
        reserve = 0
    tuner = Tuner(store, evaluator, study.space, study.baseline,
                  budget=dataclasses.replace(budget, trials=settings.trials - reserve)
                  if settings.trials and settings.strategy != "rate" else budget,
                  objective=settings.objective, seed=settings.seed, on_trial=on_trial,
                  count_stored=count_stored, executor=executor, in_flight=in_flight,
                  shared=worker)
    if worker:
        serve_budget(tuner, settings.strategy)
    else:
        tuner.run(settings.strategy)
    tuner.budget = budget
    return tuner


def _store_outcome(store: StudyStore, settings: StudySettings, study: ResolvedStudy,
                   rows: list[TrialResult], picks: list[Pick],
                   confirmation: Confirmation | None,
                   base_row: TrialResult | None, resolution: float) -> None:
    """The study's outcome, stored beside its trials: the picks with their commands, the
    Pareto front, the confirmation, the baseline's trial and the picks' resolution."""
    model_ref, quant, version = settings.model, study.quant, study.version
    store.set_attr("picks", [
        {"goal": p.goal, "trial": p.row.number, "gain": p.gain, "reasons": list(p.reasons),
         "rivals": list(p.rivals),
         "command": render_serve(_served(p.row, quant), model_ref, version).command(),
         "yaml": render_yaml(_served(p.row, quant), model_ref, version)}
        for p in picks])
    store.set_attr("pareto", [r.number for r in pareto_front(rows)])
    store.set_attr("confirmation", confirmation.to_dict() if confirmation else None)
    store.set_attr("baseline_number", base_row.number if base_row else None)
    store.set_attr("resolution", resolution)


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


def _served(row: TrialResult, quant: Quantization) -> ServingConfig:
    """A pick's configuration as its command must serve it: vLLM quantises a 16-bit checkpoint
    at load time only when told (``--quantization fp8``), as ``advise`` writes it; a study
    stored before its trials carried the flag gets it here."""
    config = config_from_json(row.config)
    if config.quantization is None and quant.vllm_flag:
        return config.replace(quantization=quant.vllm_flag)
    return config


def _goodput(store: StudyStore, evaluator: Evaluator, config: ServingConfig,
             row: TrialResult | None) -> None:
    """The rate search for ``config`` (the baseline), its state stored after every ladder so
    a resumed study continues it."""
    if row is None or not row.ran:
        cause = "it did not run" if row is None else f"it failed ({row.status}: " \
                                                        f"{row.cause})"
        store.set_attr("rate_search", {"trial": row and row.number,
                                       "error": f"no rate search: {cause}"})
        return
    stored = store.study.user_attrs.get("rate_search")
    state = None
    if stored and "error" not in stored and stored.get("trial") == row.number:
        state = RateSearch.from_dict(stored)
    search_rate(evaluator, config, row, state,
                on_round=lambda s: store.set_attr("rate_search", s.to_dict()))


def study_data(study, storage_url: str) -> StudyResult:
    """A stored study as the report and the CLI read it."""
    attrs = study.user_attrs
    settings = attrs.get("settings", {})
    rows = sorted(StudyStore(study, SearchSpace(()), ()).rows(), key=lambda r: r.number or 0)
    return dataclasses.replace(StudyResult.from_dict({
        "study": study.study_name, "storage": storage_url,
        "model": settings.get("model"), "gpu": settings.get("gpu"),
        "vllm_version": settings.get("vllm_version"),
        "workload": (settings.get("workload") or {}).get("name"),
        "backend": settings.get("backend"), "objective": settings.get("objective"),
        "slos": settings.get("slos", {}), "baseline": attrs.get("baseline_number"),
        "picks": attrs.get("picks", []), "pareto": attrs.get("pareto", []),
        "confirmation": attrs.get("confirmation"), "settings": settings,
        "rate_search": attrs.get("rate_search"),
        "offered_rate": attrs.get("offered_rate", settings.get("rate")
                                  if isinstance(settings.get("rate"), float | int) else None),
        "rate_note": attrs.get("rate_note"), "resolution": attrs.get("resolution"),
        "emulation": attrs.get("emulation"),
    }), trials=tuple(rows))  # already typed by the store: not read twice

