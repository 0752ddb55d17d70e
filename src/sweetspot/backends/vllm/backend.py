"""Real trials: one vLLM server per trial, measured by the load generator, always taken down.

A trial's life (each phase timed): check the server options against the installed vLLM
(milliseconds; a refused flag ends here as ``invalid`` and no process starts) → spawn the server
in its own process group → wait for ``/health`` → read the start-up log (KV cache tokens, max
concurrency, model load) → warm-up requests → the workload, with ``/metrics`` before, during and
after → stop the group and wait until its port and device memory are free. A memory sampler
runs from spawn to stop. Whatever happens — a failure to start, a death mid-run, a deadline, an
exception or Ctrl-C in the caller — the server's processes are gone when ``run`` returns or
raises (unless the caller asked to keep a healthy server up).

Failures are classified by vLLM's decisive log line (``logs.classify_failure``): ``oom``,
``invalid`` or ``crash``; a start-up or run deadline is ``timeout``.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.base import (
    Server,
    Target,
    Trial,
)
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.vllm.guard import TRIAL_ENV, reap_orphans
from sweetspot.backends.vllm.installed import InstalledVllm, detect_vllm
from sweetspot.backends.vllm.logs import classify_failure
from sweetspot.backends.vllm.memory import MemorySampler
from sweetspot.backends.vllm.served import Phases, VllmServer, one_line, read_log, refused
from sweetspot.backends.vllm.server import (
    DUMMY_WEIGHTS,
    ServerHandle,
    ServerStartError,
    ServerStartTimeout,
    free_port,
    launch_server,
    server_argv,
    weights_of,
)
from sweetspot.engine.render import render_serve
from sweetspot.engine.validate import validate_config
from sweetspot.spec.hardware import Hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request
from sweetspot.spec.version import parse_vllm_version

__all__ = ["TRIAL_ENV", "VllmBackend", "split_serve_command"]

# Every process of a trial's server carries its trial folder in the environment: a way to find
# (and a test to prove there is no) leftover process, whatever title it gave itself.
_SERVE_PROGRAMS = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"))
# Options the backend sets itself; a user's copy would start a second, conflicting value.
_OWN_OPTIONS = ("--host", "--port", "--model")


def _own_option(name: str) -> bool:
    """``name`` is one of the backend's own options or an abbreviation of one (vLLM's parser
    takes ``--po`` for ``--port``)."""
    return name.startswith("--") and len(name) > 3 and any(o.startswith(name)
                                                           for o in _OWN_OPTIONS)


def split_serve_command(words: Sequence[str]) -> tuple[str | None, list[str]]:
    """``[vllm serve] [MODEL] options…`` -> (model or None, options)."""
    words = list(words)
    for program in _SERVE_PROGRAMS:
        if tuple(words[:len(program)]) == program:
            words = words[len(program):]
            break
    if words and not words[0].startswith("-"):
        return words[0], words[1:]
    return None, words


class VllmBackend:
    """Launch-and-measure trials of one model on this machine.

    ``python``: an interpreter that imports vLLM (default: this one). ``template``: a launch
    command for a vLLM elsewhere (a container); then the version must be given, and options
    are checked against sweetspot's flag table for it instead of the installed parser.
    ``dummy_weights``: random weights (``--load-format dummy``) instead of the model's own.
    """

    name = "vllm"
    measured = True

    def __init__(
        self,
        model_dir: Path | str,
        *,
        trials_dir: Path | str,
        tokenizer_dir: Path | str | None = None,
        python: Path | str | None = None,
        template: str | None = None,
        vllm_version: Version | None = None,
        hardware: Hardware | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 600.0,
        run_timeout_s: float | None = None,
        stop_timeout_s: float = 15.0,
        warmup_requests: int = 1,
        memory_interval_s: float = 0.25,
        dummy_weights: bool = False,
    ) -> None:
        if template is not None and vllm_version is None:
            raise SweetspotError("a launch template needs --vllm-version: the options are "
                                 "checked against that release")
        self.model_dir = str(model_dir)
        self.tokenizer_dir = str(tokenizer_dir) if tokenizer_dir is not None else None
        self.trials_dir = Path(trials_dir)
        self.python = str(python) if python is not None else sys.executable
        self.template = template
        self.hardware = hardware  # for vLLM's cross-setting checks of a ServingConfig
        self.env = dict(env or {})
        self.extra_args = tuple(extra_args)  # fixed options after every config's own
        self.startup_timeout_s = startup_timeout_s
        self.run_timeout_s = run_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.warmup_requests = warmup_requests
        self.memory_interval_s = memory_interval_s
        self.dummy_weights = dummy_weights
        self._version = vllm_version
        self._installed: InstalledVllm | None = None
        # Servers a killed sweetspot left (its guard killed too): stopped before any is started.
        self.reaped = reap_orphans()
        for reaped in self.reaped:
            print(f"sweetspot: {reaped.describe()}", file=sys.stderr)

    @classmethod
    def for_target(cls, target: Target) -> VllmBackend:
        v = target.options
        version = parse_vllm_version(target.vllm_version) if v.get("template") else None
        return cls(target.model_ref, trials_dir=Path(v.get("trials_dir", ".sweetspot/trials")),
                   tokenizer_dir=v.get("tokenizer"), python=v.get("python"),
                   template=v.get("template"), vllm_version=version,
                   hardware=target.setup.hardware, env=v.get("env") or {},
                   extra_args=v.get("args") or (),
                   startup_timeout_s=v.get("startup_timeout_s", 600.0),
                   run_timeout_s=v.get("run_timeout_s"))

    @property
    def installed(self) -> InstalledVllm | None:
        """The interpreter's vLLM (read once, then cached on disk); None with a template."""
        if self.template is None and self._installed is None:
            self._installed = detect_vllm(self.python)
        return self._installed

    @property
    def version(self) -> Version:
        installed = self.installed
        if installed is not None:
            return installed.version
        assert self._version is not None
        return self._version

    def check(self, args: Sequence[str]) -> list[str]:
        """Why vLLM would refuse the server options ``args`` (empty: it would not)."""
        own = [a for a in args if _own_option(a.split("=", 1)[0].replace("_", "-"))]
        problems = [f"{flag} is set by sweetspot for each trial; leave it out"
                    for flag in own]
        installed = self.installed
        if installed is not None:
            return problems + (installed.check_argv(args) or self._value_problems(args))
        from sweetspot.engine.lint import lint_command

        report = lint_command(shlex.join(["vllm", "serve", self.model_dir, *args]),
                              self.version)
        return problems + [f.message for f in report.errors]

    def _value_problems(self, args: Sequence[str]) -> list[str]:
        """Values vLLM's own configuration checks refuse at start-up (an out-of-domain knob, a
        max-model-len beyond the model's), found without starting it, in vLLM's words: the
        server would take seconds (a GPU's: minutes) to say the same."""
        from sweetspot.engine.lint import lint_command

        config = lint_command(shlex.join(["vllm", "serve", self.model_dir, *args]),
                              self.version).config
        if config is None:
            return []
        allow_long = "1" in (self.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
                             os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
        return [p.message for p in validate_config(config, self.version, None, self._arch)
                if p.severity == "error" and not (allow_long and p.flag == "--max-model-len")]

    @functools.cached_property
    def _arch(self):
        """The model folder's architecture, where sweetspot can read it (else no model checks)."""
        from sweetspot.spec.model import load_model

        try:
            return load_model(self.model_dir).arch
        except (SweetspotError, OSError, ValueError):
            return None

    def serve(self, config: ServingConfig) -> AbstractContextManager[Server]:
        """``config`` validated against the release, rendered and launched."""
        started_s = time.monotonic()
        errors = [p for p in validate_config(config, self.version, self.hardware)
                  if p.severity == "error"]
        if errors:
            return refused(errors[0].message, tuple(p.message for p in errors), started_s,
                            str(self.version))
        return self.serve_args(self.config_args(config))

    def config_args(self, config: ServingConfig) -> list[str]:
        """The server options of ``config`` (no program, no model), fixed extras last."""
        rendered = render_serve(config, self.model_dir, self.version)
        return [*rendered.argv(())[1:], *self.extra_args]

    def server_command(self, args: Sequence[str], port: int | None = None) -> list[str]:
        """The exact command a trial of the server options ``args`` starts (the port is picked
        at launch: a free one now unless given)."""
        return server_argv(self.python, self.model_dir, tokenizer_dir=self.tokenizer_dir,
                           args=args, port=free_port() if port is None else port,
                           template=self.template, dummy_weights=self.dummy_weights)

    def weights(self, args: Sequence[str]) -> str:
        """"dummy" or "real": what a server with the options ``args`` loads."""
        return weights_of([*(DUMMY_WEIGHTS if self.dummy_weights else ()), *args])

    def run_args(self, args: Sequence[str], requests: Sequence[Request], load: LoadConfig,
                 *, on_done: Callable[[], None] | None = None, **serve: Any) -> Trial:
        """One run of ``requests`` on a server of the options ``args`` (``serve_args``)."""
        with self.serve_args(args, **serve) as server:
            server.run(requests, load, on_done)
        return server.trial

    @contextmanager
    def serve_args(
        self,
        args: Sequence[str],
        *,
        name: str | None = None,  # the trial's folder under trials_dir
        keep_server: bool = False,
        on_ready: Callable[[ServerHandle], None] | None = None,
        scrape_interval_s: float = 1.0,
    ) -> Iterator[Server]:
        """A server of the options ``args`` (no program, no model): see the module docstring.
        Each run's ``load`` supplies everything of the load generator but the URL and model."""
        started_s = time.monotonic()
        phase = Phases(started_s)
        problems = self.check(args)  # SweetspotError: no usable vLLM, the caller's input
        if problems:
            with refused(problems[0], tuple(problems), started_s, str(self.version)) as server:
                yield server
            return
        phase.check_s = time.monotonic() - started_s
        folder = _new_folder(self.trials_dir, name)
        server = VllmServer(self, phase, folder / "vllm.log", scrape_interval_s)
        sampler = MemorySampler(self.memory_interval_s)
        try:
            with ExitStack() as stack:
                handle = self._launch(stack, server, args, folder, sampler, keep_server)
                if handle is not None and on_ready is not None:
                    on_ready(handle)
                try:
                    yield server
                finally:
                    server.stopping()
            if handle is None or not keep_server:
                sampler.wait_device_free()
            phase.stopped_s = time.monotonic()
        finally:
            memory = sampler.stop()
            pids = tuple(sorted(sampler.pids_seen))
            pgid = sampler.pgid
            sampler.close()
            server.close(server.trial_of(args, memory, pids, pgid, kept=keep_server))

    def _launch(self, stack: ExitStack, server: VllmServer, args: Sequence[str], folder: Path,
                sampler: MemorySampler, keep_server: bool) -> ServerHandle | None:
        """The server started (stopped when ``stack`` closes), or None: it failed to start, and
        ``server`` says how."""
        try:
            handle = stack.enter_context(launch_server(
                self.python, self.model_dir, tokenizer_dir=self.tokenizer_dir, args=args,
                env={**self.env, TRIAL_ENV: str(folder.absolute())}, log_path=server.log_path,
                startup_timeout_s=self.startup_timeout_s, stop_timeout_s=self.stop_timeout_s,
                template=self.template, on_spawn=sampler.start, keep_running=keep_server,
                dummy_weights=self.dummy_weights))
        except ServerStartTimeout as exc:
            server.fail("timeout", one_line(exc), exc.log_tail)
            return None
        except ServerStartError as exc:
            log = read_log(server.log_path)
            if not log.strip():  # it never ran: a missing interpreter, a bad template
                server.fail("crash", one_line(exc))
            else:
                failure = classify_failure(log)
                server.fail(failure.status, failure.cause, failure.lines)
            return None
        server.started(handle)
        return handle



def _new_folder(parent: Path, name: str | None) -> Path:
    """``parent/name``, or the next free ``parent/trial-NNNN``; created."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if name is not None:
            folder = parent / name
            folder.mkdir(exist_ok=True)
            return folder
        taken = [int(p.name[6:]) for p in parent.glob("trial-*") if p.name[6:].isdigit()]
        number = max(taken, default=0) + 1
        while True:
            folder = parent / f"trial-{number:04d}"
            try:
                folder.mkdir()
                return folder
            except FileExistsError:  # another process took it meanwhile
                number += 1
    except OSError as exc:
        raise SweetspotError(f"cannot create a trial folder under {parent}: {exc}") from None
