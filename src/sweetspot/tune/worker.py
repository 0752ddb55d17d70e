"""``sweetspot tune --worker``: one of any number of processes, on any machines, serving one
study in a shared storage (PostgreSQL; SQLite on one machine) without Ray.

Each worker asks, runs and tells as a lone study would (the store keeps two processes off one
configuration: ``StudyStore.asked_before``), but the trial budget is the study's, not its own:
a worker stops asking once the configurations finished or running in every process reach it
(``StudyStore.spent``). A worker killed mid-trial stops beating; after the grace period (at once
on its own host, where its process is seen gone) its trial is failed, no longer counts, and a
worker still serving runs the budget it gave back. So a worker whose search is done waits while
others run trials, and searches again if budget comes back.

The study's outcome (reverted configurations, confirmation, picks) is made once, by the last
worker: when no trial runs anywhere, the workers still there elect one (``claim``) and the others
leave; a worker that joins later finds the outcome stored and leaves at once.
"""

from __future__ import annotations

import socket
import time

from sweetspot.tune.store import StudyStore
from sweetspot.tune.tuner import Tuner

__all__ = ["FINALIZER_ATTR", "claim", "serve_budget"]

FINALIZER_ATTR = "finalizer"
POLL_S = 1.0  # a waiting worker's look at the others' trials
SETTLE_S = 1.0  # an election's writes settle: the last one written wins


def serve_budget(tuner: Tuner, strategy: str) -> None:
    """Search until the study's budget is spent and no trial runs in any process."""
    while True:
        tuner.run(strategy)
        while tuner.store.running_anywhere():
            time.sleep(POLL_S)
        if tuner.exhausted():
            return


def claim(store: StudyStore) -> bool:
    """Whether this process makes the study's outcome: it writes its name, waits for the
    others' writes to settle, and wins if its own is the one stored. One already made or being
    made by another is not claimed."""
    study = store.study
    if study.user_attrs.get("picks") is not None or study.user_attrs.get(FINALIZER_ATTR):
        return False
    me = f"{socket.gethostname()}:{_process_mark()}"
    store.set_attr(FINALIZER_ATTR, me)
    time.sleep(SETTLE_S)
    return study.user_attrs.get(FINALIZER_ATTR) == me  # read from the storage again


def _process_mark() -> str:
    from sweetspot.backends.vllm.guard import owner_mark

    return owner_mark()
