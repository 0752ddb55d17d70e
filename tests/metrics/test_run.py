"""The bunched-streams check: it measures how the client received the streams, not how slow
the server's steps were."""

from packaging.version import Version

from sweetspot.backends.base import Run, run_in_order
from sweetspot.backends.loadgen import LoadConfig
from sweetspot.backends.records import RequestRecord
from sweetspot.backends.sim import SimSetup
from sweetspot.backends.sim.backend import SimBackend
from sweetspot.metrics.run import bunched_streams, measure
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.model import load_model
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.requests import Request

STEP_S = 0.015


def _run(chunk_lists: list[list[float]], processes: int = 1) -> Run:
    records = tuple(RequestRecord(i, 0.0, 0.0, tuple(c), c[-1], 32, len(c))
                    for i, c in enumerate(chunk_lists))
    return Run(records, max(r.end_s for r in records), processes)


def test_decode_steps_stalled_behind_prefills_are_not_bursts() -> None:
    """Every 8th step of each stream waits 600 ms behind other requests' prefills: large ITL
    outliers, a small median -- the old rule (median ITL under half the mean TPOT) called
    that bunched, on a GPU host whose client was idle."""
    streams = []
    for i in range(16):
        t, chunks = 0.05 + 0.01 * i, []
        for k in range(64):
            t += 0.6 if k % 8 == 7 else STEP_S
            chunks.append(t)
        streams.append(chunks)
    m = measure(_run(streams))
    data = m.to_dict()
    assert data["median_itl_ms"] < 0.5 * data["mean_tpot_ms"]  # what used to trip it
    assert m.bunched_itl_share == 0.0 and not bunched_streams(data)


def test_a_starved_client_reading_whole_answers_at_once_is_bunched() -> None:
    """The client is not scheduled from 0.1 s to 2 s: what the server sent meanwhile waits in
    its socket and is read in one go, microseconds apart."""
    streams = []
    for i in range(8):
        sent = [0.02 + 0.001 * i + STEP_S * k for k in range(64)]
        streams.append([t if t < 0.1 else max(t, 2.0 + 1e-5 * k) for k, t in enumerate(sent)])
    m = measure(_run(streams))
    assert m.bunched_itl_share > 0.8 and bunched_streams(m.to_dict())


def test_the_chat_streams_role_message_is_not_a_burst() -> None:
    """vLLM's chat stream sends the role and the first text back to back: each stream's
    first gap is near 0 by design."""
    streams = [[0.05, 0.0501, *(0.0501 + STEP_S * k for k in range(1, 6))] for _ in range(8)]
    m = measure(_run(streams))
    assert m.bunched_itl_share == 0.0 and not bunched_streams(m.to_dict())


def test_a_simulated_run_is_never_judged() -> None:
    """The simulator has no client: its exact token times (speculative steps included) say
    nothing about bursts, so its runs carry no share at all -- even an overloaded one."""
    arch = load_model("qwen2.5-0.5b").arch
    setup = SimSetup(load_hardware("a100-80gb"), arch, load_quantization("bf16"),
                     ServingConfig(), Version("0.32.0"))
    requests = [Request(i, 0.0, tuple(range(512)), 64) for i in range(64)]
    trial = run_in_order(SimBackend(setup), ServingConfig(max_num_seqs=4),
                         [(requests, LoadConfig(base_url="", model=""))])
    assert trial.ok and trial.run is not None
    m = measure(trial.run)
    assert m.bunched_itl_share is None and not bunched_streams(m.to_dict())
    # The same records as if a client had received them would be judged: the guard is the
    # missing client, not luck in the numbers.
    judged = measure(Run(trial.run.records, trial.run.duration_s, 1))
    assert judged.bunched_itl_share is not None
