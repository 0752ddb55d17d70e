"""The ``Backend`` contract (``backends/base.py``), checked the same way on every backend: the
simulator, real vLLM (the CPU build), a running endpoint (sweetspot's mock server) and the
tests' fake.

Each backend comes with an adapter: a configuration it serves, and for each failure class
(``base.FAILURES``) a way to make a trial end so — a configuration or a variant of the backend —
or the reason it cannot (the simulator keeps no deadline; an endpoint cannot run out of memory
for a server it did not start). Every class is made by some backend (checked), and every backend
meets every check that applies to it. Only the real vLLM's ok path starts a real server (one
for the module, marked ``vllm``); its failures come from launch templates — programs that print
vLLM's decisive log line, sleep, or speak vLLM's HTTP (the mock server) — so the rest runs in
seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.base import BACKENDS, FAILURES, Backend, Run, Target, Trial, backend_for
from sweetspot.backends.endpoint import EndpointBackend
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.backends.vllm import VllmBackend
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.requests import Request
from sweetspot.testing.mock_server import MockServerConfig, start_mock_server
from sweetspot.testing.tiny_model import TinyModel, make_tiny_model
from tests.backends.fake import FakeBackend
from tests.backends.vllm.conftest import SERVER_ARGS, assert_group_gone
from tests.backends.vllm.test_backend import MOCK, assert_gone

V = Version("0.32.0")  # the CPU build's release, and the one templates are checked against
SERVED = ServingConfig(max_num_seqs=8)  # what every backend serves on its ok path
REFUSED = ServingConfig(max_num_seqs=256, max_num_batched_tokens=128)  # vLLM's own check
# Two runs on one server: token ids within the tiny model's vocabulary, outputs told apart.
FIRST = tuple(Request(i, 0.0, tuple(range(5, 21)), 8) for i in range(4))
SECOND = tuple(Request(i, 0.0, tuple(range(5, 13)), 4) for i in range(2))
LOAD = LoadConfig(base_url="", model="")  # each backend's server fills in its URL and model
WRONG_KEY = LoadConfig(base_url="", model="", headers=(("Authorization", "Bearer wrong"),))
KEY = "sekret"

Fixture = Callable[[str], Any]  # request.getfixturevalue: module fixtures, started when asked


@dataclass(frozen=True)
class Scenario:
    """A backend, a configuration to serve on it, and the load of its runs."""

    backend: Backend
    config: ServingConfig
    load: LoadConfig = LOAD


Make = Callable[[Fixture], Scenario]


@dataclass(frozen=True)
class Adapter:
    """How the contract's checks reach one backend."""

    name: str  # the test ids' name
    serving: Make  # serves SERVED: the ok path
    started: Make  # serves, cheaply (the ok path, unless that is a real server)
    failing: Mapping[str, Make]  # failure class -> a scenario whose trial ends so
    cannot: Mapping[str, str]  # failure class -> why this backend cannot end a trial so
    every_request_fails: Make | str  # a server whose runs fail every request, or why none
    # What "nothing left" means here beyond this process's children: (scenario, trial) -> None
    torn_down: Callable[[Scenario, Trial], None] = lambda scenario, trial: None


# --- the simulator ---------------------------------------------------------------------------

def _sim(config: ServingConfig) -> Make:
    def make(fixture: Fixture) -> Scenario:
        arch = load_model("llama-3.1-8b").arch
        return Scenario(SimBackend(SimSetup(load_hardware("h100"), arch,
                                            arch.default_quantization(), ServingConfig(), V)),
                        config)
    return make


SIM = Adapter(
    "sim", serving=_sim(SERVED), started=_sim(SERVED),
    failing={"invalid": _sim(REFUSED),
             "oom": _sim(ServingConfig(gpu_memory_utilization=0.15))},  # no room for KV blocks
    cannot={"crash": "a simulated server does not die",
            "timeout": "simulated time keeps no deadline",
            "auth": "the simulator takes no HTTP requests, so asks for no key"},
    every_request_fails="the simulator fails no request: overload is queueing and preemption")


# --- real vLLM: the CPU build for the ok path, launch templates for the rest ---------------------

def _sh(*lines: str) -> str:
    """A launch template: a program that prints ``lines`` as its log and exits 1."""
    script = "; ".join(f"echo {shlex.quote(line)}" for line in lines) + "; exit 1"
    return f"sh -c {shlex.quote(script)}"


OOM_LINE = ("ValueError: To serve at least one request with the model's max seq len (4096), "
            "(2.0 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.0 GiB).")
CRASH_LINE = "RuntimeError: Engine core initialization failed. See root cause above."


def _templated(template: str, config: ServingConfig = SERVED, load: LoadConfig = LOAD,
               **kwargs: Any) -> Make:
    def make(fixture: Fixture) -> Scenario:
        trials = fixture("tmp_path_factory").mktemp("trials")
        return Scenario(VllmBackend("tiny-model", trials_dir=trials, template=template,
                                    vllm_version=V, hardware=load_hardware("cpu"),
                                    **{"startup_timeout_s": 30, **kwargs}), config, load)
    return make


def _real_vllm(fixture: Fixture) -> Scenario:
    tiny: TinyModel = fixture("tiny")
    return Scenario(VllmBackend(tiny.model_dir, tokenizer_dir=tiny.tokenizer_dir,
                                trials_dir=fixture("tmp_path_factory").mktemp("trials"),
                                python=fixture("vllm_python"), hardware=load_hardware("cpu"),
                                extra_args=SERVER_ARGS, dummy_weights=True), SERVED)


def _vllm_torn_down(scenario: Scenario, trial: Trial) -> None:
    """Every process seen in the server's group is gone, and the group with them (a program
    that exits at once may be gone before the sampler saw it)."""
    assert_gone(trial.server_pids)
    if trial.server_pid is not None:
        assert_group_gone(trial.server_pid)


VLLM = Adapter(
    "vllm", serving=_real_vllm, started=_templated(MOCK),
    failing={"invalid": _templated("false", REFUSED),  # refused before any process starts
             "oom": _templated(_sh("INFO loading", OOM_LINE)),
             "crash": _templated(_sh("INFO loading", CRASH_LINE)),
             "timeout": _templated("sleep 60", startup_timeout_s=1),  # never healthy
             "auth": _templated(f"{MOCK} --api-key {KEY}", load=WRONG_KEY,
                                extra_args=("--api-key", KEY))},
    cannot={},
    every_request_fails=_templated(f"{MOCK} --fail-rate 1"),
    torn_down=_vllm_torn_down)


# --- a running endpoint: the mock server, started once per module --------------------------------

@pytest.fixture(scope="module")
def mock_url() -> Iterator[str]:
    with start_mock_server(MockServerConfig(ttft_s=0.005, itl_s=0.001)) as url:
        yield url


@pytest.fixture(scope="module")
def failing_mock_url() -> Iterator[str]:
    with start_mock_server(MockServerConfig(ttft_s=0.005, itl_s=0.001, fail_rate=1.0)) as url:
        yield url


@pytest.fixture(scope="module")
def keyed_mock_url() -> Iterator[str]:
    with start_mock_server(MockServerConfig(ttft_s=0.005, itl_s=0.001, api_key=KEY)) as url:
        yield url


def _endpoint(url_fixture: str, config: ServingConfig = SERVED, load: LoadConfig = LOAD,
              headers: tuple[tuple[str, str], ...] = ()) -> Make:
    def make(fixture: Fixture) -> Scenario:
        return Scenario(EndpointBackend(fixture(url_fixture), SERVED, headers=headers),
                        config, load)
    return make


def _endpoint_torn_down(scenario: Scenario, trial: Trial) -> None:
    """The server is not the trial's to stop: it still serves."""
    assert isinstance(scenario.backend, EndpointBackend)
    with urllib.request.urlopen(scenario.backend.url + "/health", timeout=5) as answer:
        assert answer.status == 200


ENDPOINT = Adapter(
    "endpoint", serving=_endpoint("mock_url"), started=_endpoint("mock_url"),
    failing={"invalid": _endpoint("mock_url", REFUSED),  # any configuration but its own
             "crash": _endpoint("failing_mock_url"),  # every request answered HTTP 500
             "auth": _endpoint("keyed_mock_url", load=WRONG_KEY,
                               headers=(("Authorization", f"Bearer {KEY}"),))},
    cannot={"oom": "the server runs already: sweetspot never sees it start or run out of memory",
            "timeout": "no deadline of its own: a request past LoadConfig.timeout_s is a "
                       "failed request"},
    every_request_fails=_endpoint("failing_mock_url"),
    torn_down=_endpoint_torn_down)


# --- the tests' fake ---------------------------------------------------------------------------

class _Fake(FakeBackend):
    """Serves every configuration alike: fails at start as ``failure`` says, and answers every
    request (or fails each with ``error``) on a made-up clock."""

    def __init__(self, failure: tuple[str, str] | None = None, error: str | None = None):
        self.failure, self.error = failure, error

    def start(self, config: ServingConfig) -> tuple[str, str] | None:
        return self.failure

    def answer(self, config: ServingConfig, requests, load: LoadConfig, index: int) -> Run:
        records = tuple(_record(r, 0.001 * i, self.error) for i, r in enumerate(requests))
        return Run(records, max((r.end_s or r.sent_s for r in records), default=0.0))


def _record(request: Request, sent_s: float, error: str | None) -> RequestRecord:
    if error is not None:
        return RequestRecord(request.request_id, 0.0, sent_s, (), None, request.prompt_tokens,
                             0, error=error)
    chunks = tuple(sent_s + 0.01 + 0.002 * k for k in range(request.output_tokens))
    return RequestRecord(request.request_id, 0.0, sent_s, chunks, chunks[-1],
                         request.prompt_tokens, request.output_tokens)


def _fake(failure: tuple[str, str] | None = None, error: str | None = None,
          config: ServingConfig = SERVED) -> Make:
    return lambda fixture: Scenario(_Fake(failure, error), config)


FAKE = Adapter(
    "fake", serving=_fake(), started=_fake(),
    failing={kind: _fake((kind, f"the fake says {kind}")) for kind in FAILURES if kind != "auth"}
    | {"auth": _fake(error="HTTP 401 Unauthorized")},
    cannot={},
    every_request_fails=_fake(error="HTTP 500 Internal Server Error"))

ADAPTERS = {a.name: a for a in (SIM, VLLM, ENDPOINT, FAKE)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(params=list(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return ADAPTERS[request.param]


def _children() -> set[int]:
    """This process's live children (not zombies)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError):
            continue
        if int(ppid) == os.getpid() and state != "Z":
            found.add(int(stat.parent.name))
    return found


def _one_line(cause: str | None) -> None:
    assert isinstance(cause, str) and cause.strip() and "\n" not in cause, cause


# --- the ok path: two runs on one server, its trial after the block ------------------------------

@dataclass(frozen=True)
class Served:
    """The ok path, walked once per backend (a real vLLM server takes half a minute)."""

    adapter: Adapter
    scenario: Scenario
    returned: tuple[Run | None, ...]  # what each run returned, in order
    early: BaseException | None  # what ``server.trial`` raised inside the block
    trial: Trial
    children: set[int]  # this process's, before ``serve``


@pytest.fixture(scope="module", params=[
    "sim", pytest.param("vllm", marks=pytest.mark.vllm), "endpoint", "fake"])
def served(request: pytest.FixtureRequest) -> Served:
    adapter = ADAPTERS[request.param]
    scenario = adapter.serving(request.getfixturevalue)
    children = _children()
    early = None
    with scenario.backend.serve(scenario.config) as server:
        returned = (server.run(FIRST, scenario.load), server.run(SECOND, scenario.load))
        try:
            server.trial  # noqa: B018 (the access is the check)
        except RuntimeError as exc:
            early = exc
    return Served(adapter, scenario, returned, early, server.trial, children)


def test_ok_path_runs_in_order_on_one_server(served: Served) -> None:
    trial = served.trial
    assert trial.status == "ok" and trial.ok and trial.cause is None, trial.cause
    assert all(isinstance(run, Run) for run in served.returned)
    assert trial.runs == served.returned and trial.run == served.returned[0]


def test_records_are_filled_alike(served: Served) -> None:
    for requests, run in zip((FIRST, SECOND), served.trial.runs, strict=True):
        assert [r.request_id for r in run.records] == [q.request_id for q in requests]
        assert run.duration_s >= 0
        for record, asked in zip(run.records, requests, strict=True):
            assert record.error is None and record.ok, record.error
            assert record.output_tokens == asked.output_tokens
            assert record.prompt_tokens == asked.prompt_tokens
            times = record.chunk_times_s
            assert times, "no token arrived"
            assert 0.0 <= record.scheduled_s <= record.sent_s <= times[0]
            assert list(times) == sorted(times) and times[-1] <= record.end_s


def test_trial_reads_as_json_with_its_timings(served: Served) -> None:
    trial = served.trial
    assert trial.timings.total_s >= 0
    json.dumps(trial.to_dict())  # raises on anything JSON cannot hold


def test_trial_comes_only_after_the_block(served: Served) -> None:
    assert isinstance(served.early, RuntimeError), "server.trial answered before the block ended"


def test_nothing_is_left_after_the_block(served: Served) -> None:
    assert _children() <= served.children
    served.adapter.torn_down(served.scenario, served.trial)


# --- failures: a result, never an exception; the first one stands ------------------------------

@pytest.mark.parametrize("kind", FAILURES)
def test_a_failure_is_a_trial_and_the_first_one_stands(
        adapter: Adapter, kind: str, request: pytest.FixtureRequest) -> None:
    if kind not in adapter.failing:
        pytest.skip(f"{adapter.name} cannot end a trial as {kind}: {adapter.cannot[kind]}")
    scenario = adapter.failing[kind](request.getfixturevalue)
    children = _children()
    with scenario.backend.serve(scenario.config) as server:
        failed_at_start = not server.ok
        assert server.run(FIRST, scenario.load) is None
        assert not server.ok and server.status == kind, (server.status, server.cause)
        cause = server.cause
        later = "crash" if kind != "crash" else "oom"
        server.fail(later, "a later failure")
        assert server.run(SECOND, scenario.load) is None  # a failed server runs nothing
        assert (server.status, server.cause) == (kind, cause)
    trial = server.trial
    assert trial.status == kind and not trial.ok and trial.cause == cause
    _one_line(trial.cause)
    # A server that never served has no runs; one that failed in a run keeps that run alone.
    assert len(trial.runs) == (0 if failed_at_start else 1)
    json.dumps(trial.to_dict())
    assert _children() <= children
    adapter.torn_down(scenario, trial)


def test_a_run_where_every_request_failed_fails_the_server(
        adapter: Adapter, request: pytest.FixtureRequest) -> None:
    if isinstance(adapter.every_request_fails, str):
        pytest.skip(f"{adapter.name}: {adapter.every_request_fails}")
    scenario = adapter.every_request_fails(request.getfixturevalue)
    with scenario.backend.serve(scenario.config) as server:
        assert server.ok
        assert server.run(FIRST, scenario.load) is None
        assert server.run(SECOND, scenario.load) is None
    trial = server.trial
    assert trial.status == "crash" and trial.cause.startswith("every request failed"), \
        trial.cause
    _one_line(trial.cause)
    (run,) = trial.runs  # the failed run is kept: its records say what each request got
    assert [r.request_id for r in run.records] == [q.request_id for q in FIRST]
    assert all(r.error and not r.ok for r in run.records)
    adapter.torn_down(scenario, trial)


def test_every_failure_class_is_made_by_some_backend() -> None:
    for name, adapter in ADAPTERS.items():
        assert set(adapter.failing) | set(adapter.cannot) == set(FAILURES), name
        assert not set(adapter.failing) & set(adapter.cannot), name
    for kind in FAILURES:
        assert any(kind in a.failing for a in ADAPTERS.values()), f"no backend makes {kind}"
    assert any(not isinstance(a.every_request_fails, str) for a in ADAPTERS.values())


# --- teardown ------------------------------------------------------------------------------

class _Boom(Exception):
    pass


def test_an_exception_inside_propagates_and_tears_down(
        adapter: Adapter, request: pytest.FixtureRequest) -> None:
    scenario = adapter.started(request.getfixturevalue)
    children = _children()
    with pytest.raises(_Boom), scenario.backend.serve(scenario.config) as server:
        assert server.run(SECOND, scenario.load) is not None
        raise _Boom
    assert _children() <= children
    adapter.torn_down(scenario, server.trial)


def test_a_callers_mistake_raises_and_the_server_still_serves(
        adapter: Adapter, request: pytest.FixtureRequest) -> None:
    """An empty workload is the caller's input, not the server's failure."""
    scenario = adapter.started(request.getfixturevalue)
    with scenario.backend.serve(scenario.config) as server:
        with pytest.raises(SweetspotError, match="no requests"):
            server.run((), scenario.load)
        assert server.ok and server.run(SECOND, scenario.load) is not None
    assert server.trial.ok and len(server.trial.runs) == 1


# --- the registry ----------------------------------------------------------------------------

def test_the_registry_builds_each_backend_by_name(
        mock_url: str, tmp_path: Path) -> None:
    arch = load_model("llama-3.1-8b").arch
    setup = SimSetup(load_hardware("h100"), arch, arch.default_quantization(), ServingConfig(), V)
    target = Target(setup, "tiny-model", SERVED, vllm_version=str(V),
                    options={"url": mock_url, "template": MOCK, "trials_dir": str(tmp_path)})
    assert set(BACKENDS) == {"sim", "vllm", "endpoint"}
    built = {name: backend_for(name, target) for name in BACKENDS}
    assert isinstance(built["sim"], SimBackend)
    assert isinstance(built["vllm"], VllmBackend) and built["vllm"].template == MOCK
    assert isinstance(built["endpoint"], EndpointBackend) and built["endpoint"].url == mock_url
    assert {name: b.name for name, b in built.items()} == {name: name for name in BACKENDS}
    with pytest.raises(SweetspotError, match="unknown backend 'gpu'") as caught:
        backend_for("gpu", target)
    assert all(name in str(caught.value) for name in BACKENDS)

