"""The vLLM an interpreter really has: its version and its server's command-line parser.

Importing vLLM takes seconds (torch comes with it), a rejected flag costs a whole server start, and
the flag table (``engine.flags``) is sampled per minor release. So the installed server's own
parser is read once per interpreter and vLLM build — every option, whether it takes a value, its
choices, its value type — and cached as JSON; an argv is then checked against it in
microseconds by argparse itself (``argv.py`` rebuilds the parser), and a bad flag becomes an
``invalid`` trial with argparse's own wording before any process starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.argv import ParserOption, ServeParser

__all__ = ["InstalledVllm", "ParserOption", "detect_vllm"]

_CACHE_FORMAT = 1
# Run inside the target interpreter: version, and every option of the OpenAI server's parser.
_DUMP_SCRIPT = r"""
import argparse, importlib.metadata as m, json, sys
import vllm
names = m.packages_distributions().get("vllm") or ["vllm"]
version = m.version(names[0])
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:  # moved in 0.32
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
options = []
for action in parser._actions:
    if not action.option_strings or isinstance(action, argparse._HelpAction):
        continue
    nargs = action.nargs
    options.append({
        "strings": list(action.option_strings),
        "nargs": nargs if isinstance(nargs, (int, str)) or nargs is None else str(nargs),
        "choices": [str(c) for c in action.choices] if action.choices is not None else None,
        "type": getattr(action.type, "__name__", None),
    })
print("SWEETSPOT-VLLM " + json.dumps({"version": version, "path": vllm.__file__,
                                      "options": options}))
"""
_MARKER = "SWEETSPOT-VLLM "
_DETECT_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class InstalledVllm:
    """What one interpreter's vLLM is and accepts."""

    python: str  # the interpreter, as given
    version: Version
    options: dict[str, ParserOption]  # every spelling -> its option
    # the options as an argparse parser, built on the first check: most callers want the version
    _parser: ServeParser | None = field(default=None, init=False, repr=False, compare=False)

    def check_argv(self, args: Sequence[str]) -> list[str]:
        """Problems argparse would report for the server options ``args`` (no program, no
        positional model), in argparse's words; empty when the server would accept them."""
        if self._parser is None:
            object.__setattr__(self, "_parser", ServeParser(self.options.values()))
        assert self._parser is not None
        return self._parser.problems(args)


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sweetspot" / "vllm"


def _cache_key(python: str) -> str:
    """Changes when the interpreter or the vLLM beside it changes (a reinstall rewrites the
    package's metadata, so its mtime moves)."""
    resolved = os.path.realpath(python)
    stamp = []
    prefix = Path(resolved).parent.parent
    for meta in sorted(prefix.glob("lib/python3*/site-packages/vllm*.dist-info")):
        stamp.append(f"{meta.name}:{meta.stat().st_mtime_ns}")
    text = f"{_CACHE_FORMAT}|{resolved}|{'|'.join(stamp)}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def detect_vllm(python: Path | str, *, use_cache: bool = True) -> InstalledVllm:
    """Read the vLLM that ``python`` imports (cached per interpreter and installed build).

    Raises ``SweetspotError`` with a one-line reason when the interpreter cannot be run or has
    no usable vLLM.
    """
    python = str(python)
    cache = _cache_dir() / f"{_cache_key(python)}.json"
    data = None
    if use_cache:
        try:
            data = json.loads(cache.read_text())
        except (OSError, ValueError):
            data = None
    if data is None:
        data = _dump(python)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(cache)
        except OSError:
            pass  # a read-only home only costs the next call the same seconds
    try:
        version = Version(data["version"].split("+")[0])
    except (InvalidVersion, KeyError) as exc:
        raise SweetspotError(f"cannot read the vLLM version of {python}: {exc}") from None
    options: dict[str, ParserOption] = {}
    for entry in data["options"]:
        option = ParserOption(tuple(entry["strings"]), entry["nargs"],
                              tuple(entry["choices"]) if entry["choices"] is not None else None,
                              entry["type"])
        for spelling in option.strings:
            options[spelling] = option
    return InstalledVllm(python, version, options)


def _dump(python: str) -> dict:
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_LOGGING_LEVEL": "ERROR"}
    try:
        done = subprocess.run([python, "-c", _DUMP_SCRIPT], capture_output=True, text=True,
                              timeout=_DETECT_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SweetspotError(f"--vllm-python {python}: no such interpreter") from None
    except PermissionError:
        raise SweetspotError(f"--vllm-python {python}: not executable") from None
    except subprocess.TimeoutExpired:
        raise SweetspotError(f"{python} did not import vLLM within "
                             f"{_DETECT_TIMEOUT_S:.0f} s") from None
    for line in done.stdout.splitlines():
        if line.startswith(_MARKER):
            return json.loads(line[len(_MARKER):])
    last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "no output")
    if "No module named 'vllm'" in done.stderr:
        raise SweetspotError(f"{python} has no vLLM (pass --vllm-python with an interpreter "
                             "that imports vllm)")
    raise SweetspotError(f"cannot read vLLM's server options with {python}: {last.strip()}")
