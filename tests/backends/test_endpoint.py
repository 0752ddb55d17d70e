"""The endpoint backend: trials against a server sweetspot did not start."""

from __future__ import annotations

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.backends.base import run_in_order
from sweetspot.backends.endpoint import EndpointBackend
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request
from sweetspot.testing.mock_server import MockServerConfig, start_mock_server

LOAD = LoadConfig(base_url="", model="")


def _requests(n: int, output: int = 8) -> list[Request]:
    return [Request(i, 0.0, tuple(range(16)), output) for i in range(n)]


def test_measures_the_configuration_it_runs_and_refuses_others() -> None:
    serving = ServingConfig(max_num_seqs=8)
    with start_mock_server(MockServerConfig(ttft_s=0.01, itl_s=0.002)) as url:
        backend = EndpointBackend(url, serving)
        trial = run_in_order(backend, serving, [(_requests(6), LOAD), (_requests(3, 4), LOAD)])
        assert trial.status == "ok" and trial.base_url == url
        assert len(trial.run.records) == 6 and all(r.ok for r in trial.run.records)
        assert [len(r.records) for r in trial.runs[1:]] == [3]
        assert all(r.output_tokens == 4 for r in trial.runs[1].records)
        other = run_in_order(backend, serving.replace(max_num_seqs=16), [(_requests(2), LOAD)])
        assert other.status == "invalid" and "cannot change a server" in other.cause
        assert other.run is None


def test_a_server_that_fails_every_request_is_a_crash_trial() -> None:
    with start_mock_server(MockServerConfig(ttft_s=0.01, itl_s=0.002, fail_rate=1.0)) as url:
        trial = run_in_order(EndpointBackend(url, ServingConfig()), ServingConfig(),
                             [(_requests(4), LOAD)])
        assert trial.status == "crash" and "every request failed" in trial.cause


def test_unreachable_or_wrong_model_is_an_error() -> None:
    with pytest.raises(SweetspotError, match="cannot reach"):
        EndpointBackend("http://127.0.0.1:9", ServingConfig())
    with start_mock_server(MockServerConfig()) as url, pytest.raises(
            SweetspotError, match="does not serve 'other'"):
        EndpointBackend(url, ServingConfig(), model="other")
