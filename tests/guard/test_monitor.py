"""The live loop on scripted scrapes: pacing, states through an outage, what carries over
between windows (the traffic for the live workload), the summary; and the server's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweetspot._errors import SweetspotError
from sweetspot.guard.monitor import Monitor, WatchSettings, summarize, watch
from sweetspot.guard.render import summary_lines, window_record
from sweetspot.guard.scrape import LogTail, Scrape, metrics_url
from tests.guard.test_window import _scrape


class Script:
    """Scrapes handed out in order, and a clock that only sleeping moves."""

    def __init__(self, scrapes: list[Scrape]) -> None:
        self.scrapes, self.now, self.sleeps = list(scrapes), 0.0, []

    def scrape(self, url: str, timeout_s: float, headers: dict[str, str]) -> Scrape:
        return self.scrapes.pop(0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _down(taken_s: float) -> Scrape:
    return Scrape(taken_s, 0.001, None, "cannot reach http://x/metrics: refused", reached=False)


def test_an_outage_and_a_restart_as_window_states() -> None:
    script = Script([
        _scrape(0.0, ttft=[0.05] * 10, prompts=[100] * 10, outputs=[50] * 10),
        _scrape(10.0, ttft=[0.05] * 30, prompts=[100] * 30, outputs=[50] * 30),
        _down(20.0), _down(30.0),
        _scrape(40.0, ttft=[0.05] * 12, prompts=[300] * 12, outputs=[60] * 12, started=5000.0),
        _scrape(50.0, ttft=[0.05] * 20, prompts=[300] * 20, outputs=[60] * 20, started=5000.0),
    ])
    monitor = Monitor(WatchSettings("http://x/metrics", interval_s=10.0, windows=5), None, None,
                      scrape_fn=script.scrape)
    reports = watch(monitor, lambda r: None, sleep=script.sleep, clock=lambda: script.now)
    assert [r.window.state for r in reports] == [
        "ok", "server down", "server down", "restarted", "ok"]
    assert script.sleeps == [10.0] * 5
    assert [r.window.requests for r in reports] == [20, None, None, 12, 8]
    assert {a.kind for r in reports for a in r.alerts} == {"server down", "restarted"}
    # what the watch saw: 20 + 12 + 8 requests, prompts of 100 then 300 tokens
    assert monitor.prompt_lengths is not None and monitor.prompt_lengths.count == 40
    workload = monitor.live_workload()
    assert workload is not None and "fitted to 40 requests" in workload["description"]
    assert workload["prompt"]["min"] <= 100 and workload["prompt"]["max"] >= 300
    summary = summarize(reports)
    assert summary.states == {"ok": 2, "server down": 2, "restarted": 1}
    assert summary.requests == 40 and not summary.drifted
    assert summary_lines(summary, workload)[0].startswith("watched 5 windows over 50 s")
    assert window_record(reports[1])["alerts"][0]["kind"] == "server down"


def test_an_overrun_skips_ticks_instead_of_bunching_windows() -> None:
    script = Script([_scrape(float(t)) for t in range(4)])
    # the clock at the start, then twice per window (ticks, sleep): the first step took 15 s
    clock = iter([0.0, 0.0, 0.0, 25.0, 25.0, 30.0, 30.0])
    monitor = Monitor(WatchSettings("http://x/metrics", interval_s=10.0, windows=3), None, None,
                      scrape_fn=script.scrape)
    watch(monitor, lambda r: None, sleep=script.sleep, clock=lambda: next(clock))
    assert script.sleeps == [10.0, 5.0, 10.0]  # due at 10, then 30 (20 was missed), then 40


def test_the_first_scrape_decides_whether_there_is_anything_to_watch() -> None:
    for first, words in ((_down(0.0), "answer its first scrape"),
                         (Scrape(0.0, 0.01, None, "HTTP 404 from http://x/metrics"),
                          "is it a vLLM server"),
                         (Scrape(0.0, 0.01, None, "http://x/metrics has no vLLM metrics",
                                 vllm=False), "no vLLM metrics")):
        monitor = Monitor(WatchSettings("http://x/metrics"), None, None,
                          scrape_fn=Script([first]).scrape)
        with pytest.raises(SweetspotError, match=words):
            monitor.open()


def test_log_tail_reports_new_ooms_and_engine_deaths_only(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("ERROR torch.OutOfMemoryError: CUDA out of memory (before the watch)\n")
    tail = LogTail(log)
    assert tail.events() == []  # history
    with log.open("a") as handle:
        handle.write("INFO all fine\nERROR torch.OutOfMemoryError: CUDA out of memory. Tried\n"
                     "ERROR EngineCore encountered a fatal error.\npartial li")
    assert [e.kind for e in tail.events()] == ["oom", "engine dead"]
    assert tail.events() == []
    log.write_text("ERROR EngineCore encountered a fatal error.\n")  # rewritten: from its start
    assert [e.kind for e in tail.events()] == ["engine dead"]
    missing = LogTail(tmp_path / "later.log")
    assert missing.events() == []
    (tmp_path / "later.log").write_text("CUDA out of memory\n")
    assert [e.kind for e in missing.events()] == ["oom"]


def test_metrics_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics/") == "http://h:8000/metrics"
    with pytest.raises(SweetspotError, match="expected http"):
        metrics_url("h:8000")
