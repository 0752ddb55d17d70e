"""The study store: every trial of a study in an Optuna storage, so a study can resume.

One Optuna study per sweetspot study. Each evaluated configuration is an Optuna trial whose
params are the space's value labels (categorical) and whose user attribute ``row`` is the
evaluation row (``evaluate.Evaluator.row``, plus number, phase and knob); the study's user
attributes hold what the study was started with (model, GPU, workload, space, ...). A trial is
asked *before* its configuration runs, so a study killed mid-trial leaves that one trial RUNNING;
``open`` marks it failed and the strategy simply runs it again: at most the trial in flight is
lost.

Storage: a SQLite file under ``.sweetspot/`` by default, or any SQLAlchemy URL (PostgreSQL for a
study shared by several machines).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweetspot._errors import SweetspotError
from sweetspot._secrets import MASK, redact_url
from sweetspot.tune.space import SearchSpace

__all__ = ["DEFAULT_STORAGE", "StudyStore", "default_storage_url"]

DEFAULT_STORAGE = Path(".sweetspot") / "studies.db"
ROW_ATTR = "row"


def default_storage_url(path: Path = DEFAULT_STORAGE) -> str:
    return f"sqlite:///{path}"


def _storage(url: str) -> optuna.storages.BaseStorage:
    if url == ":memory:":  # benchmarks and tests: nothing kept
        return optuna.storages.InMemoryStorage()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SweetspotError(f"cannot create {path.parent} for the study storage: {exc}"
                                 ) from None
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as exc:  # SQLAlchemy's many errors: bad URL, driver, unreachable server
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        password = _password(url)
        if password:  # SQLAlchemy's message may repeat the URL
            first = first.replace(password, MASK)
        raise SweetspotError(f"cannot open the study storage {redact_url(url)}: {first}"
                             ) from None


class StudyStore:
    """One study in one storage."""

    def __init__(self, study: optuna.Study, space: SearchSpace, directions: tuple[str, ...]):
        self.study = study
        self.space = space
        self.directions = directions

    @classmethod
    def open(cls, url: str, name: str, space: SearchSpace, *, resume: bool,
             directions: tuple[str, ...] = ("maximize",),
             sampler: optuna.samplers.BaseSampler | None = None,
             meta: Mapping[str, Any] | None = None) -> StudyStore:
        """Create the study (``resume=False``: it must not exist yet) or load it
        (``resume=True``: it must exist)."""
        optuna.logging.set_verbosity(logging.WARNING)
        storage = _storage(url)
        names = set(optuna.get_all_study_names(storage))
        if resume and name not in names:
            raise SweetspotError(f"no study named {name!r} in {url}"
                                 + (f" (it has: {', '.join(sorted(names))})" if names else ""))
        if not resume and name in names:
            raise SweetspotError(f"study {name!r} already exists in {url}: add --resume to "
                                 "continue it, or give another --study-name")
        study = optuna.create_study(study_name=name, storage=storage, load_if_exists=resume,
                                    directions=list(directions), sampler=sampler)
        if not resume:
            for key, value in (meta or {}).items():
                study.set_user_attr(key, value)
        store = cls(study, space, directions)
        store._fail_interrupted()
        return store

    @classmethod
    def load(cls, url: str, name: str) -> optuna.Study:
        """A finished or running study, read-only use (``sweetspot report``)."""
        optuna.logging.set_verbosity(logging.WARNING)
        storage = _storage(url)
        if name not in set(optuna.get_all_study_names(storage)):
            raise SweetspotError(f"no study named {name!r} in {url}")
        return optuna.load_study(study_name=name, storage=storage)

    def _fail_interrupted(self) -> None:
        storage = self.study._storage
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)

    @property
    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {d.knob: CategoricalDistribution(d.labels) for d in self.space.dimensions}

    def rows(self) -> list[dict]:
        """Rows of the finished trials, in trial order (duplicates left out)."""
        out = []
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            row = trial.user_attrs.get(ROW_ATTR)
            if row is not None and row.get("duplicate_of") is None:
                out.append(row)
        return out

    def ask(self, labels: Mapping[str, str] | None = None) -> optuna.trial.Trial:
        """A new trial: at ``labels`` (fixed), or where the sampler points."""
        if labels is not None:
            self.study.enqueue_trial(dict(labels), skip_if_exists=False)
        return self.study.ask(self.distributions)

    def tell(self, trial: optuna.trial.Trial, row: dict, values: tuple[float, ...],
             constraints: Mapping[str, float]) -> None:
        trial.set_user_attr(ROW_ATTR, row)
        for key, value in constraints.items():  # > 0: infeasible; the samplers read them
            trial.set_constraint(key, value)
        self.study.tell(trial, list(values) if len(values) > 1 else values[0])

    def set_attr(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None
