"""vLLM release numbers, compared as releases (0.10.1.1 < 0.11.0 < 0.33.0)."""

from __future__ import annotations

import warnings

from packaging.version import InvalidVersion, Version

from sweetspot._errors import SweetspotError

__all__ = ["DEFAULT_VLLM_VERSION", "OLDEST_VLLM_VERSION", "NewerThanKnown",
           "parse_vllm_version"]


class NewerThanKnown(UserWarning):
    """A release newer than the newest whose flags sweetspot checked: used as that one."""


_WARNED: set[Version] = set()  # once per release and process

# The newest release whose flags and defaults sweetspot has checked (vllm-facts.md).
DEFAULT_VLLM_VERSION = Version("0.33.0")
# The oldest release sweetspot models: the V1 engine is the only engine from 0.11 on, and
# flag knowledge reaches back to 0.8 so legacy command lines can be translated.
OLDEST_VLLM_VERSION = Version("0.8.0")


def parse_vllm_version(text: str | Version | None) -> Version:
    """Parse ``0.33.0``, ``v0.10.1.1`` or ``0.11.0+cu128``; None gives the default version."""
    if text is None:
        return DEFAULT_VLLM_VERSION
    if isinstance(text, Version):
        return text
    try:
        version = Version(text.strip().lstrip("vV"))
    except InvalidVersion:
        raise SweetspotError(f"not a vLLM version: {text!r} (expected e.g. 0.33.0)") from None
    version = Version(version.base_version)  # local tags (+cu128, +cpu) don't change flags
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
