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

import dataclasses
import functools
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.endpoint import run_endpoint
from sweetspot.backends.loadgen import LoadConfig, run_load
from sweetspot.backends.trial import (
    MoreRuns,
    Trial,
    TrialTimings,
    every_request_failed,
    further_runs,
)
from sweetspot.backends.vllm.guard import TRIAL_ENV, reap_orphans
from sweetspot.backends.vllm.installed import InstalledVllm, detect_vllm
from sweetspot.backends.vllm.logs import classify_failure, parse_startup
from sweetspot.backends.vllm.memory import MemorySampler
from sweetspot.backends.vllm.server import (
    DUMMY_WEIGHTS,
    ServerHandle,
    ServerStartError,
    ServerStartTimeout,
    _signal_group,
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

__all__ = ["TRIAL_ENV", "VllmBackend", "split_serve_command"]

# Every process of a trial's server carries its trial folder in the environment: a way to find
# (and a test to prove there is no) leftover process, whatever title it gave itself.
_SERVE_PROGRAMS = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"))
# Options the backend sets itself; a user's copy would start a second, conflicting value.
_OWN_OPTIONS = ("--host", "--port", "--model")


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

    name = "vllm"  # the tuner's ``Backend.name``

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
        own = [a for a in args if a.split("=", 1)[0].replace("_", "-") in _OWN_OPTIONS]
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

    def run(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig,
            **kwargs) -> Trial:
        """A trial of ``config``: validated against the release, rendered, launched."""
        started_s = time.monotonic()
        errors = [p for p in validate_config(config, self.version, self.hardware)
                  if p.severity == "error"]
        if errors:
            return _refused(errors[0].message, tuple(p.message for p in errors), started_s,
                            str(self.version))
        return self.run_args(self.config_args(config), requests, load, **kwargs)

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

    def run_args(
        self,
        args: Sequence[str],
        requests: Sequence[Request],
        load: LoadConfig,
        *,
        name: str | None = None,  # the trial's folder under trials_dir
        keep_server: bool = False,
        on_ready: Callable[[ServerHandle], None] | None = None,
        on_done: Callable[[], None] | None = None,
        scrape_interval_s: float = 1.0,
        more: MoreRuns = (),
    ) -> Trial:
        """A trial of the server options ``args`` (no program, no model): see the module
        docstring. ``load`` supplies everything of the load generator but the URL and model.
        ``more``: further (requests, load) runs on the same server after the first; their
        results are the trial's ``more_runs``."""
        started_s = time.monotonic()
        phase = _Phases(started_s)
        problems = self.check(args)  # SweetspotError: no usable vLLM, the caller's input
        if problems:
            return _refused(problems[0], tuple(problems), started_s, str(self.version))
        phase.check_s = time.monotonic() - started_s
        folder = _new_folder(self.trials_dir, name)
        log_path = folder / "vllm.log"
        sampler = MemorySampler(self.memory_interval_s)
        outcome: dict = {}
        try:
            try:
                with launch_server(
                    self.python, self.model_dir, tokenizer_dir=self.tokenizer_dir, args=args,
                    env={**self.env, TRIAL_ENV: str(folder.absolute())}, log_path=log_path,
                    startup_timeout_s=self.startup_timeout_s,
                    stop_timeout_s=self.stop_timeout_s, template=self.template,
                    on_spawn=sampler.start, keep_running=keep_server,
                    dummy_weights=self.dummy_weights,
                ) as handle:
                    phase.startup_s = handle.startup_s
                    outcome["handle"] = handle
                    if on_ready is not None:
                        on_ready(handle)
                    self._measure(handle, requests, load, phase, outcome, on_done,
                                  scrape_interval_s, more)
                    phase.stopping_s = time.monotonic()
            except ServerStartTimeout as exc:
                return self._failed("timeout", _one_line(exc), exc.log_tail, phase, log_path,
                                    sampler, args)
            except ServerStartError as exc:
                log = _read(log_path)
                if not log.strip():  # it never ran: a missing interpreter, a bad template
                    return self._failed("crash", _one_line(exc), (), phase, log_path, sampler,
                                        args)
                failure = classify_failure(log)
                return self._failed(failure.status, failure.cause, failure.lines, phase,
                                    log_path, sampler, args)
            if not keep_server:
                sampler.wait_device_free()
            phase.stopped_s = time.monotonic()
        finally:
            outcome["memory"] = sampler.stop()
            outcome["pids"] = set(sampler.pids_seen)
            sampler.close()
        return self._finish(outcome, phase, log_path, keep_server, args)

    def _measure(self, handle: ServerHandle, requests: Sequence[Request], load: LoadConfig,
                 phase: _Phases, outcome: dict, on_done, scrape_interval_s: float,
                 more: MoreRuns = ()) -> None:
        served = self._served(load, handle)
        watchdog = _Watchdog(handle.pid, self.run_timeout_s)
        try:
            warm_s = time.monotonic()
            if self.warmup_requests and requests:
                warmup = [Request(-1 - i, 0.0, requests[0].prompt_token_ids, 16)
                          for i in range(self.warmup_requests)]
                run_load(warmup, served)
            phase.warmup_s = time.monotonic() - warm_s
            outcome["run"] = run_endpoint(requests, served, on_done,
                                          scrape_interval_s=scrape_interval_s)
            outcome["more"] = []
            for extra_requests, extra_load in further_runs(more, outcome["run"]):
                if not handle.alive() or watchdog.fired:
                    break
                outcome["more"].append(run_endpoint(
                    extra_requests, self._served(extra_load, handle), on_done,
                    scrape_interval_s=scrape_interval_s))
        finally:
            watchdog.cancel()
        outcome["timed_out"] = watchdog.fired
        runs = [outcome.get("run"), *outcome.get("more", ())]
        failed = any(r is None or any(rec.error for rec in r.records) for r in runs)
        # Requests that failed may mean a dying server: give it a moment to be seen dead.
        outcome["alive"] = handle.alive(grace_s=_DEATH_GRACE_S if failed else 0.0)

    def _served(self, load: LoadConfig, handle: ServerHandle) -> LoadConfig:
        """``load`` aimed at the launched server, with the API key it was started with (its
        ``--api-key`` or ``VLLM_API_KEY``) unless the load brings its own."""
        headers = load.headers
        key = _api_key(handle.argv) or self.env.get("VLLM_API_KEY")
        if key and not any(name.lower() == "authorization" for name, _ in headers):
            headers = (("Authorization", f"Bearer {key}"), *headers)
        return dataclasses.replace(load, base_url=handle.base_url, model=self.model_dir,
                                   warmup_requests=0, headers=headers)

    def _finish(self, outcome: dict, phase: _Phases, log_path: Path, kept: bool,
                args: Sequence[str]) -> Trial:
        handle: ServerHandle = outcome["handle"]
        run = outcome.get("run")
        log = _read(log_path)
        status, cause, lines = "ok", None, ()
        failed = next(filter(None, map(every_request_failed,
                                       [run, *outcome.get("more", ())])), None)
        if outcome.get("timed_out"):
            status = "timeout"
            cause = f"the workload ran past the run deadline of {self.run_timeout_s:g} s"
        elif not outcome.get("alive", True):
            failure = classify_failure(log)
            status, cause, lines = ("oom" if failure.status == "oom" else "crash",
                                    f"the server died during the run: {failure.cause}",
                                    failure.lines)
        elif failed:
            status, cause = failed
        workload_s = None
        if run is not None:
            workload_s = run.duration_s + sum(r.duration_s for r in outcome.get("more", ()))
        timings = TrialTimings(
            check_s=phase.check_s, startup_s=phase.startup_s, warmup_s=phase.warmup_s,
            workload_s=workload_s,
            teardown_s=None if kept else (phase.stopped_s or 0) - (phase.stopping_s or 0),
            total_s=time.monotonic() - phase.started_s,
        )
        return Trial(status, cause, run, timings, argv=handle.argv, log_lines=tuple(lines),
                     log_path=log_path, vllm_version=str(self.version),
                     startup=parse_startup(log), memory=outcome.get("memory"),
                     base_url=handle.base_url, server_pid=handle.pid,
                     server_pids=tuple(sorted(outcome.get("pids", ()))), kept=kept,
                     more_runs=tuple(outcome.get("more", ())), weights=self.weights(args))

    def _failed(self, status: str, cause: str, lines: Sequence[str], phase: _Phases,
                log_path: Path, sampler: MemorySampler, args: Sequence[str]) -> Trial:
        sampler.wait_device_free()
        timings = TrialTimings(check_s=phase.check_s, startup_s=phase.startup_s,
                               total_s=time.monotonic() - phase.started_s)
        return Trial(status, cause, None, timings, log_lines=tuple(lines), log_path=log_path,
                     vllm_version=str(self.version), startup=parse_startup(_read(log_path)),
                     memory=sampler.stop(), server_pid=sampler.pgid,
                     server_pids=tuple(sorted(sampler.pids_seen)), weights=self.weights(args))


@dataclasses.dataclass
class _Phases:
    started_s: float
    check_s: float | None = None
    startup_s: float | None = None
    warmup_s: float | None = None
    stopping_s: float | None = None
    stopped_s: float | None = None


_DEATH_GRACE_S = 2.0


class _Watchdog:
    """Kills the server's group when the run deadline passes, so every open request fails at
    once and the load generator returns."""

    def __init__(self, pgid: int, timeout_s: float | None) -> None:
        self.fired = False
        self._timer = None
        if timeout_s is not None:
            self._timer = threading.Timer(timeout_s, self._fire, args=(pgid,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, pgid: int) -> None:
        import signal

        self.fired = True
        _signal_group(pgid, signal.SIGKILL)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


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


def _refused(cause: str, lines: tuple[str, ...], started_s: float, version: str) -> Trial:
    return Trial("invalid", cause, None, TrialTimings(total_s=time.monotonic() - started_s),
                 log_lines=lines, vllm_version=version)


def _api_key(argv: Sequence[str]) -> str | None:
    """The value of the last ``--api-key`` in a server's command line (vLLM's own rule)."""
    key = None
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            key = argv[i + 1]
        elif arg.startswith("--api-key="):
            key = arg.split("=", 1)[1]
    return key


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
