"""The study store: every trial of a study in an Optuna storage, so a study can resume.

One Optuna study per sweetspot study. Each evaluated configuration is an Optuna trial whose
params are the space's value labels (categorical) and whose user attribute ``row`` is the
evaluation row (``evaluate.Evaluator.row``, plus number, phase and knob); the study's user
attributes hold what the study was started with (model, GPU, workload, space, ...).

Several processes may serve one study at once (a second `tune` with the same settings joins it).
A trial is asked *before* its configuration runs and beats Optuna's RDB heartbeat while it runs
(``running``): one whose process dies stops beating and is failed by the next process that opens
the study or asks a trial once ``GRACE_S`` has passed (Optuna's ``fail_stale_trials``), while
another process's live trial is left alone. An interrupted trial is failed on the way out. At
most the trial in flight is lost; the strategy simply runs it again.

Storage: a SQLite file under ``.sweetspot/`` by default, or any SQLAlchemy URL (PostgreSQL for a
study shared by several machines).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweetspot._errors import SweetspotError
from sweetspot._secrets import MASK, redact_url
from sweetspot.tune.result import TrialResult
from sweetspot.tune.space import SearchSpace

__all__ = ["DEFAULT_STORAGE", "StudyExists", "StudyStore", "default_storage_url"]



@contextmanager
def _quiet() -> Iterator[None]:
    """Optuna marks the RDB heartbeat, PartialFixedSampler and fail_stale_trials experimental,
    and warns at every ask that the heartbeat is meant for Study.optimize: used here on
    purpose, with ask and tell (``running``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        yield


DEFAULT_STORAGE = Path(".sweetspot") / "studies.db"
ROW_ATTR = "row"
HEARTBEAT_ATTR = "heartbeats"  # the study's trials beat while they run (``running``)
OWNER_ATTR = "owner"  # the host and process running a trial (backends.vllm.guard's mark)
HEARTBEAT_S = 10  # a running trial's heartbeat
GRACE_S = 60  # a RUNNING trial whose heartbeat is older than this lost its process
SQLITE_BUSY_S = 60  # a writer waits this long for another process's write to the file


def default_storage_url(path: Path = DEFAULT_STORAGE) -> str:
    return f"sqlite:///{path}"


# How long a process waits for a rival trial's parameters to reach the storage (normally
# milliseconds: the rival is between Optuna's creating the trial and suggesting its values).
PARAMS_WAIT_S = 10.0
# What a storage being created by another process at the same moment says.
_CREATION_RACE = ("already exists", "UNIQUE constraint failed", "duplicate key value")


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
    engine = {"connect_args": {"timeout": SQLITE_BUSY_S}} if url.startswith("sqlite") else None
    attempt = 0
    while True:
        try:
            with _quiet():
                return optuna.storages.RDBStorage(url, engine_kwargs=engine,
                                                  heartbeat_interval=HEARTBEAT_S,
                                                  grace_period=GRACE_S)
        except Exception as exc:  # SQLAlchemy's: bad URL, driver, unreachable server, ...
            # ... or another process creating the same new storage's tables (or stamping its
            # schema version: "UNIQUE constraint failed: alembic_version") at this moment
            attempt += 1
            if not any(s in str(exc) for s in _CREATION_RACE) or attempt == 3:
                raise _storage_error(url, exc) from None
            time.sleep(0.5)


def _storage_error(url: str, exc: Exception) -> SweetspotError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    password = _password(url)
    if password:  # SQLAlchemy's message may repeat the URL
        first = first.replace(password, MASK)
    return SweetspotError(f"cannot open the study storage {redact_url(url)}: {first}")


class StudyExists(SweetspotError):
    """A new study's name is taken in the storage."""


class StudyStore:
    """One study in one storage."""

    def __init__(self, study: optuna.Study, space: SearchSpace, directions: tuple[str, ...],
                 storage: optuna.storages.BaseStorage | None = None):
        self.study = study
        self.space = space
        self.directions = directions
        self.storage = storage
        self._mine: set[int] = set()  # numbers of the trials this process is running
        self._taken: set[int] = set()  # numbers of the finished trials ``new_rows`` returned

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
        exists = StudyExists(f"study {name!r} already exists in {redact_url(url)}: add --resume "
                             "to continue it, or give another --study-name")
        if not resume and name in names:
            raise exists
        try:
            study = optuna.create_study(study_name=name, storage=storage, load_if_exists=resume,
                                        directions=list(directions), sampler=sampler)
        except optuna.exceptions.DuplicatedStudyError:  # another process created it first
            raise exists from None
        if not resume:
            for key, value in {**(meta or {}), HEARTBEAT_ATTR: True}.items():
                study.set_user_attr(key, value)
        elif not study.user_attrs.get(HEARTBEAT_ATTR):
            # Started by a sweetspot without heartbeats: no process can still be running its
            # RUNNING trials, which would never go stale.
            for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                study.tell(trial.number, state=TrialState.FAIL)
            study.set_user_attr(HEARTBEAT_ATTR, True)
        store = cls(study, space, directions, storage)
        store.fail_stale()
        return store

    @classmethod
    def stored_settings(cls, url: str, name: str, wait_s: float = 10.0) -> dict | None:
        """The settings a study was started with; None when there is no such study. A study
        another process has just created gets its settings a moment later: waited for."""
        optuna.logging.set_verbosity(logging.WARNING)
        storage = _storage(url)
        if name not in set(optuna.get_all_study_names(storage)):
            return None
        deadline = time.monotonic() + wait_s
        while True:
            settings = optuna.load_study(study_name=name, storage=storage
                                         ).user_attrs.get("settings")
            if settings is not None or time.monotonic() > deadline:
                return settings
            time.sleep(0.2)

    @classmethod
    def load(cls, url: str, name: str) -> optuna.Study:
        """A finished or running study, read-only use (``sweetspot report``)."""
        optuna.logging.set_verbosity(logging.WARNING)
        storage = _storage(url)
        if name not in set(optuna.get_all_study_names(storage)):
            raise SweetspotError(f"no study named {name!r} in {url}")
        return optuna.load_study(study_name=name, storage=storage)

    def fail_stale(self) -> None:
        """Fail the RUNNING trials whose process died: at once where it ran on this host (its
        pid and start time, kept with the trial, name no live process: a tune SIGKILLed and
        resumed goes on without waiting), else once it stopped beating ``GRACE_S`` ago."""
        if not isinstance(self.storage, optuna.storages.RDBStorage):
            return
        from sweetspot.backends.vllm.guard import owner_alive

        with _quiet():
            optuna.storages.fail_stale_trials(self.study)
        host = socket.gethostname()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = trial.user_attrs.get(OWNER_ATTR) or {}
            if (trial.number not in self._mine and owner.get("host") == host
                    and not owner_alive(str(owner.get("process")))):
                with suppress(Exception):  # another process failed it first
                    self.study.tell(trial.number, state=TrialState.FAIL)

    def beat(self, trial: optuna.trial.Trial) -> Callable[[bool], None]:
        """``trial``'s heartbeat, beaten every ``HEARTBEAT_S`` from a thread while its
        configuration runs; the function returned stops it, and with ``failed`` fails the
        trial (interrupted, or its run raised: ``tell`` finishes it otherwise)."""
        storage, stop = self.storage, threading.Event()
        beating = isinstance(storage, optuna.storages.RDBStorage)
        trial_id = trial._trial_id  # Optuna's own heartbeat thread names the trial by its id

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                storage.record_heartbeat(trial_id)

        thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
        if beating:
            storage.record_heartbeat(trial_id)
            thread.start()
        self._mine.add(trial.number)

        def stopped(failed: bool) -> None:
            stop.set()
            if failed:  # already finished, or the storage is gone: the grace period ends it
                with suppress(Exception):
                    self.study.tell(trial, state=TrialState.FAIL)
            if beating:
                thread.join()
            self._mine.discard(trial.number)

        return stopped

    @contextmanager
    def running(self, trial: optuna.trial.Trial) -> Iterator[None]:
        """``beat`` around a block: the trial is failed if the block raises."""
        stop = self.beat(trial)
        try:
            yield
        except BaseException:
            stop(True)
            raise
        stop(False)

    def asked_before(self, labels: Mapping[str, str], number: int) -> bool:
        """A trial numbered below ``number`` is running or has finished at ``labels``: another
        process asked for this configuration first (trial numbers are handed out by the
        storage, one at a time, so of two processes that asked at once exactly one sees the
        other's lower number and yields). A trial's parameters reach the storage one by one
        after its number: a lower trial still without all of them is waited for (briefly),
        else both processes would see no rival and run the configuration twice."""
        want = dict(labels)
        deadline = time.monotonic() + PARAMS_WAIT_S
        while True:
            lower = [t for t in self.study.get_trials(
                deepcopy=False, states=(TrialState.RUNNING, TrialState.COMPLETE))
                if t.number < number
                and (t.user_attrs.get(ROW_ATTR) or {}).get("duplicate_of") is None]
            if any(t.params == want for t in lower):
                return True
            unset = [t for t in lower if t.state == TrialState.RUNNING
                     and len(t.params) < len(want)
                     and all(want.get(k) == v for k, v in t.params.items())]
            if not unset or time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def running_elsewhere(self, labels: Mapping[str, str], besides: int | None = None) -> bool:
        """Another process is running a trial at ``labels`` now (trial ``besides``, just
        asked here, left out)."""
        self.fail_stale()
        want, mine = dict(labels), self._mine | {besides}
        return any(t.number not in mine and t.params == want
                   for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    @property
    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {d.knob: CategoricalDistribution(d.labels) for d in self.space.dimensions}

    def running_anywhere(self) -> bool:
        """A trial of the study runs in some process (those whose process died are failed
        first)."""
        self.fail_stale()
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    def spent(self) -> int:
        """Configurations of the study finished or running in any process: its shared
        budget spent (``tune --worker``). A trial that failed for want of its process (lost,
        killed) is not counted: its budget goes back. A running repeat of a configuration (a
        sampler's, or a process that yields to another) counts once."""
        self.fail_stale()
        seen = set()
        for trial in self.study.get_trials(deepcopy=False,
                                           states=(TrialState.COMPLETE, TrialState.RUNNING)):
            row = trial.user_attrs.get(ROW_ATTR)
            if row is not None and row.get("duplicate_of") is not None:
                continue
            seen.add(json.dumps(trial.params, sort_keys=True))
        return len(seen)

    def new_rows(self) -> list[TrialResult]:
        """``rows`` not returned by an earlier call: the rows other processes (or this one)
        finished since. Each finished trial's row is parsed once (a study loop takes these in
        before every trial: reading every row each time grows with the square of the
        study)."""
        out = []
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if trial.number in self._taken:
                continue
            self._taken.add(trial.number)
            row = trial.user_attrs.get(ROW_ATTR)
            if row is not None and row.get("duplicate_of") is None:
                out.append(TrialResult.from_dict(row))
        return out

    def rows(self) -> list[TrialResult]:
        """Rows of the finished trials, in trial order, one per configuration: duplicates
        left out (the sampler's repeats, and the later of two processes that ran one
        configuration at once)."""
        out, seen = [], set()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            row = trial.user_attrs.get(ROW_ATTR)
            if row is None or row.get("duplicate_of") is not None:
                continue
            key = json.dumps(row["config"], sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(TrialResult.from_dict(row))
        return out

    def ask(self, labels: Mapping[str, str] | None = None,
            sampler: optuna.samplers.BaseSampler | None = None) -> optuna.trial.Trial:
        """A new trial: at ``labels`` (fixed), or where ``sampler`` (the study's by default)
        points. Fixed by this process's own sampler, not Optuna's queue of enqueued trials,
        which every process serving the study pops from."""
        study_sampler = self.study.sampler
        try:
            with _quiet():
                if labels is not None:
                    self.study.sampler = optuna.samplers.PartialFixedSampler(dict(labels),
                                                                             study_sampler)
                elif sampler is not None:
                    self.study.sampler = sampler
                trial = self.study.ask(self.distributions)
        finally:
            self.study.sampler = study_sampler
        if isinstance(self.storage, optuna.storages.RDBStorage):
            from sweetspot.backends.vllm.guard import owner_mark

            # Beating from its first moment, it goes stale if this process dies before
            # ``running`` takes over; its owner tells this host's processes at once.
            self.storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr(OWNER_ATTR, {"host": socket.gethostname(),
                                             "process": owner_mark()})
        return trial

    def tell(self, trial: optuna.trial.Trial, row: TrialResult, values: tuple[float, ...],
             constraints: Mapping[str, float]) -> None:
        trial.set_user_attr(ROW_ATTR, row.to_dict())  # the store's edge: JSON from here on
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
