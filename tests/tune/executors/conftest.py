"""The executor tests' helpers: ``sweetspot tune``'s settings as the command line would give
them."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from sweetspot.cli._tune_settings import TuneSettings

__all__ = ["tune_settings_of"]


def tune_settings_of(**given) -> TuneSettings:
    """Every option of ``sweetspot tune`` at its default, with ``given`` on top."""
    from sweetspot.cli._tune_settings import tune_settings
    from sweetspot.cli.tune import tune

    defaults = {name: p.default for name, p in inspect.signature(tune).parameters.items()}
    unknown = set(given) - set(defaults)
    assert not unknown, unknown
    return tune_settings(SimpleNamespace(**{**defaults, **given}))
