"""One real vLLM server (CPU build, tiny dummy model) shared by every real-server test."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweetspot.backends.vllm import ServerHandle, launch_server
from sweetspot.testing.tiny_model import TinyModel, make_tiny_model

# torch.compile's cache is keyed by the model's path, which differs per run (tmp_path): compiling
# anew costs ~35 s per start on 2 cores and grows ~/.cache/vllm. These tests need no compiled graph.
SERVER_ARGS = ("--enforce-eager",)

def assert_group_gone(pgid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def assert_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


def port_of(handle: ServerHandle) -> int:
    return int(handle.base_url.rsplit(":", 1)[1])



@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """A dummy model whose steps, not the client's work, take the CPU (~465 output tok/s at
    concurrency 16 on this 2-vCPU VM, against ~3,000 for ``tiny``): for tests that compare
    measurements, which a client reading thousands of streamed events a second on a core the
    server needs would disturb (benchmarks/RESULTS.md, 2026-12-04)."""
    return make_tiny_model(tmp_path_factory.mktemp("heavy"), layers=4, hidden=1024, heads=8,
                           kv_heads=2, intermediate=2816)


@pytest.fixture(scope="session")
def server(
    vllm_python: Path, tiny: TinyModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerHandle]:
    log_path = tmp_path_factory.mktemp("server") / "vllm.log"
    with launch_server(
        vllm_python, tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir, args=SERVER_ARGS,
        log_path=log_path, dummy_weights=True,
    ) as handle:
        yield handle
    assert_group_gone(handle.pid)
    assert_port_free(port_of(handle))


