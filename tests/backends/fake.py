"""A backend for tests whose answers are written in Python: subclass ``FakeBackend`` and say
what serving a configuration does (``start``), what a run answers (``answer``) and what the
server shows of itself (``facts``, ``counters``). It implements the ``Backend`` seam with the
same ``Server`` rules as the real ones, and the contract suite checks it like them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sweetspot.backends.base import Run, Server, ServerFacts, Trial, TrialTimings
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request


class FakeBackend:
    name = "fake"
    measured = True  # its numbers are treated as measured ones (a client, resolution 5 %)

    def start(self, config: ServingConfig) -> tuple[str, str] | None:
        """(status, cause) when ``config`` fails to start; None when it serves."""
        return None

    def answer(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig,
               index: int) -> Run | tuple[str, str]:
        """The ``index``-th run of a server of ``config``, or (status, cause): it failed."""
        raise NotImplementedError

    def facts(self, config: ServingConfig) -> ServerFacts:
        return ServerFacts()

    def counters(self, config: ServingConfig) -> dict[str, Any]:
        return {}

    @contextmanager
    def serve(self, config: ServingConfig) -> Iterator[Server]:
        started = time.monotonic()
        server = _FakeServer(self, config)
        if (failed := self.start(config)) is not None:
            server.fail(*failed)
        try:
            yield server
        finally:
            server.close(Trial(server.status, server.cause, tuple(server.runs),
                               TrialTimings(total_s=time.monotonic() - started),
                               server=self.facts(config),
                               counters=self.counters(config) if server.runs else {},
                               log_lines=server.log_lines))


class _FakeServer(Server):
    def __init__(self, backend: FakeBackend, config: ServingConfig) -> None:
        super().__init__()
        self.backend, self.config = backend, config

    def _run(self, requests: Sequence[Request], load: LoadConfig,
             on_done: Callable[[], None] | None) -> Run | None:
        answer = self.backend.answer(self.config, requests, load, len(self.runs))
        if isinstance(answer, tuple):
            self.fail(*answer)
            return None
        return answer
