"""Secrets are used, never written.

API keys, tokens and passwords reach sweetspot in three places: the server's options
(``--api-key K``), its environment (``--env HF_TOKEN=...``) and a storage URL
(``postgresql://user:PASSWORD@host/db``). Everything sweetspot writes or prints — result JSON,
the study's database, reports, error messages — carries ``***`` in their place, as vLLM's own
log does. What a study stores is redacted too, so ``tune --resume`` takes the secrets again from
sweetspot's environment (``restore_env``, ``restore_args``).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sweetspot._errors import SweetspotError

__all__ = ["MASK", "is_secret_name", "redact_args", "redact_command", "redact_env", "redact_url",
           "restore_args", "restore_env"]

MASK = "***"
# Environment variables: *TOKEN*, *KEY*, *SECRET*, *PASSWORD* (HF_TOKEN, VLLM_API_KEY, ...).
_SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Options whose value is a secret (--api-key, --hf-token); not --ssl-keyfile, which is a path.
_SECRET_FLAG = re.compile(r"^--[\w-]*(api[-_]key|token|secret|password|passwd)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """An environment variable whose value is a secret."""
    return bool(_SECRET_ENV.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: MASK if is_secret_name(k) and v else v for k, v in env.items()}


def redact_args(args: Sequence[str]) -> list[str]:
    """A command line with the value of every secret option masked (``--api-key K`` and
    ``--api-key=K``)."""
    out = list(args)
    for i, arg in enumerate(out):
        flag, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out[i] = f"{flag}={MASK}"
            elif i + 1 < len(out):
                out[i + 1] = MASK
    return out


def redact_command(command: str) -> str:
    """A shell command line (``vllm serve ... --api-key K``) with every secret option's value
    masked; unchanged, quoting and all, when it holds none."""
    try:
        args = shlex.split(command)
    except ValueError:
        return command
    redacted = redact_args(args)
    return command if redacted == args else shlex.join(redacted)


def redact_url(url: Any) -> Any:
    """A URL without its password (PostgreSQL storage URLs may carry one); others unchanged."""
    if not isinstance(url, str) or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    netloc = f"{parts.username}:{MASK}@{parts.netloc.rsplit('@', 1)[1]}"
    return urlunsplit(parts._replace(netloc=netloc))


def restore_env(env: Mapping[str, str]) -> dict[str, str]:
    """A stored environment with each masked value taken from sweetspot's own environment;
    a one-line error naming what is missing."""
    missing = [k for k, v in env.items() if v == MASK and k not in os.environ]
    if missing:
        raise SweetspotError(f"the study's server environment had {', '.join(missing)}, which "
                             "is never stored: set it in the environment to resume")
    return {k: os.environ[k] if v == MASK else v for k, v in env.items()}


def restore_args(args: Sequence[str]) -> list[str]:
    """Stored server options with a masked ``--api-key`` taken from ``VLLM_API_KEY``; a
    one-line error for any other masked secret."""
    out = list(args)
    for i, arg in enumerate(out):
        flag, eq, value = arg.partition("=")
        masked = (value == MASK) if eq else (arg == MASK and i > 0 and
                                             bool(_SECRET_FLAG.match(out[i - 1])))
        if not masked:
            continue
        name = flag if eq else out[i - 1]
        key = os.environ.get("VLLM_API_KEY") if name == "--api-key" else None
        if key is None:
            raise SweetspotError(f"the study's server option {name} is never stored: set "
                                 "VLLM_API_KEY (for --api-key) to resume, or start the study "
                                 "with --env VLLM_API_KEY instead of the option")
        out[i] = f"{flag}={key}" if eq else key
    return out
