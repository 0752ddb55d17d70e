"""vLLM release numbers, compared as releases (0.10.1.1 < 0.11.0 < 0.33.0).

Builds that are not releases are taken as the release they name, with a note: a development
build (``0.19.1.dev12+gabc``, what a wheel built from vLLM's main branch calls itself) or a
release candidate as its base release, ``nightly``/``main``/``latest`` as the newest release
sweetspot has checked.
"""

from __future__ import annotations

import warnings

from packaging.version import InvalidVersion, Version

from sweetspot._errors import SweetspotError

__all__ = ["DEFAULT_VLLM_VERSION", "OLDEST_VLLM_VERSION", "NewerThanKnown", "NotARelease",
           "parse_vllm_version"]


class NewerThanKnown(UserWarning):
    """A release newer than the newest whose flags sweetspot checked: used as that one."""


class NotARelease(UserWarning):
    """A development, nightly or pre-release build: taken as the release it names."""


_WARNED: set[Version] = set()  # once per release and process
_NOTED: set[str] = set()

# The newest release whose flags and defaults sweetspot has checked (vllm-facts.md).
DEFAULT_VLLM_VERSION = Version("0.33.0")
# The oldest release sweetspot models: 0.6.0, the first with multi-step scheduling and the
# V0 engine's asynchronous output processing (V1 is the default engine from 0.8.0 and the only
# one from 0.11 on).
OLDEST_VLLM_VERSION = Version("0.6.0")
_NIGHTLY = ("nightly", "main", "latest")


def parse_vllm_version(text: str | Version | None) -> Version:
    """Parse ``0.33.0``, ``v0.10.1.1`` or ``0.11.0+cu128``; None gives the default version."""
    if text is None:
        return DEFAULT_VLLM_VERSION
    if isinstance(text, Version):
        return text
    if text.strip().lower() in _NIGHTLY:
        _note(f"vLLM {text.strip()} is taken as {DEFAULT_VLLM_VERSION}, the newest release "
              "sweetspot has checked")
        return DEFAULT_VLLM_VERSION
    try:
        parsed = Version(text.strip().lstrip("vV"))
    except InvalidVersion:
        raise SweetspotError(f"not a vLLM version: {text!r} (expected e.g. 0.33.0, "
                             "0.19.1.dev12+gabc or nightly)") from None
    version = Version(parsed.base_version)  # local tags (+cu128, +cpu) don't change flags
    if parsed.is_prerelease:
        _note(f"vLLM {text.strip()} is a {'development ' if parsed.is_devrelease else 'pre-'}"
              f"release build: taken as {version}")
    if version < OLDEST_VLLM_VERSION:
        raise SweetspotError(
            f"vLLM {version} is older than the oldest release sweetspot knows "
            f"({OLDEST_VLLM_VERSION})"
        )
    if version > DEFAULT_VLLM_VERSION and version not in _WARNED:
        _WARNED.add(version)
        warnings.warn(NewerThanKnown(
            f"vLLM {version} is newer than the newest release sweetspot has checked "
            f"({DEFAULT_VLLM_VERSION}): its flags and defaults are taken to be "
            f"{DEFAULT_VLLM_VERSION}'s, and `sweetspot lint` checks commands against them"),
            stacklevel=2)
    return version


def _note(message: str) -> None:
    if message not in _NOTED:
        _NOTED.add(message)
        warnings.warn(NotARelease(message), stacklevel=3)
