"""The executor tests' helpers: ``sweetspot tune``'s settings as the command line would give
them."""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from sweetspot.cli._tune_settings import TuneSettings

__all__ = ["one_ray_at_a_time", "tune_settings_of"]

# Ray clusters on one machine share ports a cluster does not let choose (its agents'), and a
# two-core machine has no room for two: the tests that start Ray take turns (pytest-xdist
# workers share this lock file).
RAY_LOCK = Path(tempfile.gettempdir()) / "sweetspot-ray-tests.lock"


_held = [0]  # this process's holds: a test inside the module's cluster already has the lock


@contextlib.contextmanager
def one_ray_at_a_time() -> Iterator[None]:
    if _held[0]:  # flock on a second descriptor would wait for this process itself
        _held[0] += 1
        try:
            yield
        finally:
            _held[0] -= 1
        return
    with open(RAY_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _held[0] += 1
        try:
            yield
        finally:
            _held[0] -= 1


def tune_settings_of(**given) -> TuneSettings:
    """Every option of ``sweetspot tune`` at its default, with ``given`` on top."""
    from sweetspot.cli._tune_settings import tune_settings
    from sweetspot.cli.tune import tune

    defaults = {name: p.default for name, p in inspect.signature(tune).parameters.items()}
    unknown = set(given) - set(defaults)
    assert not unknown, unknown
    return tune_settings(SimpleNamespace(**{**defaults, **given}))
