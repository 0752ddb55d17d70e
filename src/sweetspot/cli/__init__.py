"""The ``sweetspot`` command: a thin Typer layer over the packages.

Every command turns its options into specs at this edge, calls one function, and renders the
result. Bad input raises ``SweetspotError`` (or a Click usage error) and ends here as one line on
stderr with exit code 2.

Exit codes: 0 an answer; 1 a finding that is "no" (lint found problems; a trial failed; a model
does not fit, with the tensor-parallel size that does; a study with no pick); 2 unusable input or
a missing dependency (named, with its pip install); 70 a bug; 130 / 143 interrupted / terminated.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import warnings

import typer

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import app

# The commands register on the app as they are imported, in --help's order.
# isort: off
from sweetspot.cli import lint, advise, bench, simulate, calibrate  # noqa: F401
from sweetspot.cli import report, tune, compare, monitor, tools  # noqa: F401
# isort: on

__all__ = ["app", "main"]

_terminated = False


def _on_sigterm(signum, frame) -> None:
    """SIGTERM takes Ctrl-C's path (asyncio cancels the run, context managers stop launched
    servers); an exception raised straight from here could land in an event-loop callback,
    which would log it and carry on."""
    global _terminated
    _terminated = True
    signal.raise_signal(signal.SIGINT)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is one line on stderr, as an error is."""
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn every failure into an exit code."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    warnings.showwarning = _show_warning
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # Inherited from a shell that started us in the background (`cmd &` in a script, as
        # under nohup): SIGTERM's path to a clean stop goes through SIGINT, and a SIGINT sent
        # to sweetspot itself must stop its launched servers, not be lost.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # What is loaded by now lives as long as the process: the collector need not scan it again
    # (each full pass over typer's, pydantic's and numpy's objects costs ~15 ms).
    gc.freeze()
    try:
        code = app(args=argv, prog_name="sweetspot", standalone_mode=False)
    except SweetspotError as exc:
        _fail(str(exc), 2)
    except (typer.Abort, KeyboardInterrupt):
        _fail("terminated", 143) if _terminated else _fail("interrupted", 130)
    except Exception as exc:
        # Typer vendors Click, so its usage errors are matched by shape, not by class.
        if callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code"):
            _fail(exc.format_message(), 2)
        if isinstance(exc, ImportError) and (missing := _missing_dependency(exc)):
            _fail(missing, 2)
        if os.environ.get("SWEETSPOT_DEBUG"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); "
              "rerun with SWEETSPOT_DEBUG=1 for the traceback", 70)
    if code == 130:  # Typer turns KeyboardInterrupt into exit code 130
        _fail("terminated", 143) if _terminated else _fail("interrupted", 130)
    sys.exit(code if isinstance(code, int) else 0)


# Import names whose pip package is spelled otherwise; any other installs as its own name.
_PIP_NAMES = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "prometheus_client": "prometheus-client"}


def _missing_dependency(exc: ImportError) -> str | None:
    """What to install for a third-party import a command failed on (commands import their
    heavy dependencies when they run, so a broken environment shows there, not at start-up);
    None for sweetspot's own modules, whose failure is a bug."""
    from importlib import metadata

    from packaging.requirements import Requirement

    module = (exc.name or "").split(".")[0]
    if not module or module == "sweetspot":
        return None
    package = _PIP_NAMES.get(module, module.replace("_", "-"))
    try:
        requirements = [Requirement(r) for r in metadata.requires("vllm-sweetspot") or ()]
    except metadata.PackageNotFoundError:  # run from a source tree
        requirements = []
    wanted = next((r for r in requirements if r.name.lower() == package.lower()), None)
    if module == "vllm":
        how = ("pip install vllm, or pass --vllm-python with an interpreter that has it "
               "(SWEETSPOT_VLLM_PYTHON)")
    elif wanted is not None and wanted.marker is not None and "extra" in str(wanted.marker):
        extra = str(wanted.marker).split("==")[-1].strip(" '\"")
        how = f"pip install 'vllm-sweetspot[{extra}]' (or pip install '{wanted}')"
    elif wanted is not None:
        how = f"pip install '{wanted}' (a dependency of vllm-sweetspot)"
    else:
        how = f"pip install {package}"
    if isinstance(exc, ModuleNotFoundError) and exc.name == module:
        return f"missing dependency: the Python package {package} is not installed; {how}"
    return f"the installed {package} lacks what sweetspot needs ({exc}); {how}"


def _fail(message: str, code: int) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)
