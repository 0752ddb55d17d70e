"""The real-server backend: vLLM's OpenAI-compatible server started and stopped per trial."""

from sweetspot.backends.vllm.backend import VllmBackend, split_serve_command
from sweetspot.backends.vllm.installed import InstalledVllm, detect_vllm
from sweetspot.backends.vllm.server import (
    ServerHandle,
    ServerStartError,
    ServerStartTimeout,
    free_port,
    launch_server,
)

__all__ = [
    "InstalledVllm",
    "ServerHandle",
    "ServerStartError",
    "ServerStartTimeout",
    "VllmBackend",
    "detect_vllm",
    "free_port",
    "launch_server",
    "split_serve_command",
]
