"""``sweetspot compare A B --backend vllm``: two ``vllm serve`` commands on real servers that
sweetspot starts itself, here on a fake backend whose servers' speeds are known (the real
backend's own start, run and stop are the contract suite's; one real pair costs CI minutes). What
is checked is what compare does with the backend: a fresh server for each side of each pair, A
before B in every pair, the same requests on both sides of a pair, the verdict the servers'
speeds imply, and a B whose server fails, or that vLLM would refuse, as a regression with its
cause."""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from sweetspot.backends.base import Run
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.requests import Request
from tests.backends import fake
from tests.guard.conftest import GPU, MODEL, compare_commands

# Servers started elsewhere (the template the real backend would run): no vLLM to import here,
# the picks' release is --vllm-version's.
TEMPLATE = "ssh gpu-host vllm serve {args}"
TOKENS_PER_S = 200.0  # one sequence's decode speed
FIRST_TOKEN_S = 0.02
SPREAD = 0.02  # each server's speed: lognormal, this log-sd


class SlotFake(fake.FakeBackend):
    """A server of ``max_num_seqs`` slots, each decoding one sequence at ``TOKENS_PER_S``
    times the server's own speed (drawn when it starts): request throughput grows with the
    slots. ``fails`` maps a max-num-seqs to the (status, cause) its server fails to start
    with."""

    def __init__(self, fails: dict[int, tuple[str, str]] | None = None) -> None:
        self.fails = fails or {}
        self.served: list[int] = []  # max-num-seqs of each server, in start order
        self.requests: list[list[tuple[int, ...]]] = []  # per server, each run's prompts' hash
        self._rng = random.Random(7)
        self._speed = 1.0

    def start(self, config: ServingConfig) -> tuple[str, str] | None:
        seqs = config.max_num_seqs or 256
        self.served.append(seqs)
        self.requests.append([])
        self._speed = math.exp(self._rng.gauss(0.0, SPREAD))
        return self.fails.get(seqs)

    def answer(self, config: ServingConfig, requests: Sequence[Request], load: LoadConfig,
               index: int) -> Run:
        self.requests[-1].append(tuple(hash(r.prompt_token_ids) for r in requests))
        slots = [0.0] * min(config.max_num_seqs or 256, load.max_concurrency or 10**6)
        heapq.heapify(slots)
        records = []
        for r in sorted(requests, key=lambda r: r.arrival_s):
            sent = 0.0 if math.isinf(r.arrival_s) else r.arrival_s
            start = max(sent, heapq.heappop(slots))
            step = 1 / (TOKENS_PER_S * self._speed)
            chunks = tuple(start + FIRST_TOKEN_S + step * k for k in range(r.output_tokens))
            heapq.heappush(slots, chunks[-1])
            records.append(RequestRecord(r.request_id, sent, sent, chunks, chunks[-1],
                                         r.prompt_tokens, r.output_tokens))
        return Run(tuple(records), max(c.end_s for c in records), 1)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> SlotFake:
    """``--backend vllm`` gets the fake in place of the real backend."""
    import sweetspot.tune.study as study

    backend = SlotFake({2: ("oom", "CUDA out of memory while allocating the KV cache")})
    real = study._backend
    monkeypatch.setattr(study, "_backend", lambda settings, *args: (
        backend if settings.backend == "vllm" else real(settings, *args)))
    return backend


def _compare(a: int, b: int, fixed_workload: Path, **given):
    return compare_commands(f"vllm serve {MODEL} --max-num-seqs {a}",
                            f"vllm serve {MODEL} --max-num-seqs {b}", backend="vllm", gpu=GPU,
                            workload=str(fixed_workload), num_requests=24, rate="auto",
                            launch_template=TEMPLATE, **given)


def test_each_pair_runs_a_then_b_on_fresh_servers_with_the_same_requests(
        servers: SlotFake, fixed_workload: Path) -> None:
    result = _compare(4, 6, fixed_workload, min_repeats=2, max_repeats=4)
    pairs = len(result.runs)
    assert result.source == "vllm"
    # --rate auto measures A's capacity on A's first server, which then runs A's first pair
    assert servers.served == [4, 6] * pairs
    for a_runs, b_runs in zip(servers.requests[::2], servers.requests[1::2], strict=True):
        assert len(a_runs) == len(b_runs) == 2  # the capacity run, then the traffic run
        # a closed loop as long as each configuration's batch needs, from the same draw
        shorter = min(len(a_runs[0]), len(b_runs[0]))
        assert a_runs[0][:shorter] == b_runs[0][:shorter]
        assert a_runs[1] == b_runs[1]  # the traffic run: the same requests
    assert len({runs[1] for runs in servers.requests[::2]}) == pairs  # a new seed a pair
    throughput = next(m for m in result.metrics if m.metric.key == "output_throughput")
    assert throughput.verdict == "better", throughput
    # 6 slots against 4, the servers' speeds 2 % apart
    assert throughput.change is not None and 0.3 < throughput.change < 0.7
    assert result.verdict == "better" and not result.regressions
    assert not any("speed" in note for note in result.notes)  # no simulated spread on vllm


def test_a_b_whose_server_runs_out_of_memory_is_a_regression_with_its_cause(
        servers: SlotFake, fixed_workload: Path) -> None:
    result = _compare(4, 2, fixed_workload)
    assert servers.served == [4, 2]  # the first pair: B's failure ends it
    assert result.verdict == "worse"
    assert result.regressions == ("B failed (oom): CUDA out of memory while allocating the KV "
                                  "cache",)


def test_a_b_vllm_would_refuse_starts_no_server(servers: SlotFake,
                                                fixed_workload: Path) -> None:
    result = compare_commands(f"vllm serve {MODEL} --max-num-seqs 4",
                              f"vllm serve {MODEL} --max-num-seqs 4 --tensor-parallel-size 3",
                              backend="vllm", gpu=GPU, workload=str(fixed_workload),
                              num_requests=24, rate="auto", launch_template=TEMPLATE)
    assert servers.served == [4]
    assert result.verdict == "worse"
    assert result.failure == ("B failed (invalid): Total number of attention heads (28) must "
                              "be divisible by tensor parallel size (3).")


def test_the_gate_exits_1_on_a_slower_b_and_0_on_the_same_command(
        servers: SlotFake, fixed_workload: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from sweetspot.cli import main

    def gate(a: int, b: int) -> tuple[int, dict]:
        out = tmp_path / f"{a}-{b}.json"
        with pytest.raises(SystemExit) as exit_:
            main(["compare", f"vllm serve {MODEL} --max-num-seqs {a}",
                  f"vllm serve {MODEL} --max-num-seqs {b}", "--backend", "vllm", "--gpu", GPU,
                  "--workload", str(fixed_workload), "--num-requests", "24",
                  "--max-repeats", "4", "--launch-template", TEMPLATE,
                  "--fail-on-regression", "--json", str(out)])
        return exit_.value.code, json.loads(out.read_text())

    code, slower = gate(6, 4)
    assert (code, slower["verdict"]) == (1, "worse"), capsys.readouterr()
    assert "output throughput" in " ".join(slower["regressions"]).lower()
    code, same = gate(4, 4)
    assert (code, same["verdict"]) == (0, "no significant difference"), capsys.readouterr()
