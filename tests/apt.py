"""Debian packages the test set-ups install when missing (root and network; ``apt-get update``
first when the package lists are stale)."""

from __future__ import annotations

import os
import subprocess

__all__ = ["apt_env", "apt_install", "run"]


def apt_env() -> dict[str, str]:
    return {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def apt_install(package: str) -> subprocess.CompletedProcess:
    """``apt-get install -y --no-install-recommends PACKAGE``, after an update if it fails."""
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    done = run(install, apt_env())
    if done.returncode != 0:  # no package lists yet, or stale ones
        run(["apt-get", "update"], apt_env())
        done = run(install, apt_env())
    return done


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:  # no systemctl, no update-rc.d: nothing to do there
        return subprocess.CompletedProcess(cmd, 127, "", str(exc))
