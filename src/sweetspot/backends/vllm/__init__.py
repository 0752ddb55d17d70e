"""The real-server backend: vLLM's OpenAI-compatible server started and stopped per trial."""

from sweetspot.backends.vllm.server import (
    ServerHandle,
    ServerStartError,
    ServerStartTimeout,
    free_port,
    launch_server,
)

__all__ = ["ServerHandle", "ServerStartError", "ServerStartTimeout", "free_port", "launch_server"]
