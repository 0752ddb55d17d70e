"""How sweetspot starts vLLM servers, from the options `bench --launch` and `tune --backend vllm`
share: the interpreter that imports vLLM (or a launch template for one elsewhere) and the
servers' environment. ``--env`` is parsed here and nowhere else."""

from __future__ import annotations

import os
import sys

from pydantic import BaseModel, ConfigDict

from sweetspot._errors import SweetspotError


class ServerOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    python: str  # --vllm-python, else $SWEETSPOT_VLLM_PYTHON, else this interpreter
    template: str | None  # --launch-template: the command that starts vLLM elsewhere
    env: dict[str, str]  # --env: what the servers' environment gets on top of sweetspot's


def server_options(vllm_python: str | None, template: str | None,
                   env_items: list[str] | None) -> ServerOptions:
    return ServerOptions(python=vllm_python_path(vllm_python), template=template,
                         env=_env_items(env_items))


def vllm_python_path(given: str | None) -> str:
    """--vllm-python, else $SWEETSPOT_VLLM_PYTHON, else this interpreter."""
    return given or os.environ.get("SWEETSPOT_VLLM_PYTHON") or sys.executable


def _env_items(items: list[str] | None) -> dict[str, str]:
    """--env KEY=VALUE, or KEY alone for this process's own value (a token kept out of the
    shell's history: it is used, never written)."""
    env: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not key or any(c in key for c in " \t\n"):
            raise SweetspotError(f"bad --env {key!r}: expected KEY=VALUE or KEY")
        if not sep:
            if key not in os.environ:
                raise SweetspotError(f"--env {key}: not set in this environment (or pass "
                                     f"{key}=VALUE)")
            value = os.environ[key]
        env[key] = value
    return env
