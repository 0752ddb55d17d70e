"""`sweetspot monitor`: watch a live vLLM server against what was tuned (issue 20).

With ``--emit-rules``/``--emit-rule-tests``/``--emit-dashboard`` it writes the envelope as
Prometheus rules, promtool tests and a Grafana dashboard first (``cli/_monitor_export.py``), and
watches only when ``--url`` is given too.

Exit codes: 0 every window was within the envelope (or the exports were written); 1 some
window raised an alert (``--once``: its one window; ``--windows N`` or Ctrl-C: any window); 2
unusable input — no ``--url``, a server that does not answer the first scrape or is not vLLM, a
malformed baseline. Once the server has
answered, down, restarted or slow is a window's state, never an exit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_url
from sweetspot.cli._common import ApiKeyOpt, HeaderOpt, _err, _out, app

if TYPE_CHECKING:
    from sweetspot.guard.monitor import Monitor, WindowReport

ONCE_HELP = ("Watch one window (--interval seconds, two scrapes) and exit: 0 within the "
             "envelope, 1 an alert, 2 unusable input.")

# The exports (cli/_monitor_export.py).
EmitRulesOpt = Annotated[Path | None, typer.Option(
    help="Write Prometheus recording and alerting rules holding the deployment to --baseline's "
         "pick (offline: no --url needed).")]
EmitRuleTestsOpt = Annotated[Path | None, typer.Option(
    help="Write promtool unit tests of those rules (promtool test rules FILE).")]
EmitDashboardOpt = Annotated[Path | None, typer.Option(
    help="Write a Grafana dashboard of the same panels, with the pick's thresholds.")]
SelectorOpt = Annotated[str, typer.Option(
    help="PromQL label matchers of the deployment's scrape targets, for the exports.")]
AlertForOpt = Annotated[str, typer.Option(
    "--for", help="How long a threshold stays crossed before its alert fires (exports).")]


@app.command()
def monitor(
    url: Annotated[str | None, typer.Option(help="The vLLM server to watch (its /metrics is "
                                                 "scraped).")] = None,
    baseline: Annotated[str | None, typer.Option(
        help="What it was tuned to: STUDY[:goal] (goal: max-throughput, low-latency, "
             "memory-limited, balanced (default) or baseline) or a bench --json "
             "RESULT.json.")] = None,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL of STUDY (default "
                                                     "sqlite:///.sweetspot/studies.db).")] = None,
    interval: Annotated[float, typer.Option(help="Seconds per window.", min=0.2)] = 15.0,
    once: Annotated[bool, typer.Option("--once", help=ONCE_HELP)] = False,
    windows: Annotated[int | None, typer.Option(help="Stop after N windows (default: until "
                                                     "Ctrl-C).", min=1)] = None,
    jsonl: Annotated[Path | None, typer.Option(help="Append each window (and the summary) "
                                                    "here as a JSON line.")] = None,
    write_workload: Annotated[Path | None, typer.Option(
        help="Keep a workload spec fitted to the live traffic here (rewritten each window "
             "with traffic), for sweetspot tune --workload.")] = None,
    log_file: Annotated[Path | None, typer.Option(help="The server's log: OOMs and engine "
                                                       "deaths it reports become alerts.")] = None,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
    emit_rules: EmitRulesOpt = None,
    emit_rule_tests: EmitRuleTestsOpt = None,
    emit_dashboard: EmitDashboardOpt = None,
    selector: SelectorOpt = 'job="vllm"',
    alert_for: AlertForOpt = "5m",
) -> int:
    """Watch a live vLLM server: per-window latencies, load, restarts and drift, held against
    the tuned envelope; or export that envelope as Prometheus rules and a Grafana dashboard."""
    from sweetspot.cli._monitor_export import Exports, write_exports

    exports = Exports(emit_rules, emit_rule_tests, emit_dashboard, selector, alert_for)
    if exports.wanted and write_exports(exports, baseline, storage) and url is None:
        return 0  # the exports alone: nothing to watch
    if url is None:
        raise SweetspotError("monitor needs --url URL (the vLLM server to watch), or "
                             "--emit-rules/--emit-dashboard with --baseline")
    from sweetspot.backends.loadgen import request_headers
    from sweetspot.guard.baseline import load_baseline
    from sweetspot.guard.drift import tuned_traffic
    from sweetspot.guard.monitor import Monitor, WatchSettings
    from sweetspot.guard.scrape import metrics_url

    settings = WatchSettings(
        metrics_url=metrics_url(url), interval_s=interval, windows=1 if once else windows,
        headers=dict(request_headers(api_key, header or ())), log_file=log_file)
    envelope = load_baseline(baseline, storage) if baseline is not None else None
    watcher = Monitor(settings, envelope, tuned_traffic(envelope))
    watcher.open()  # a server that does not answer, or is not vLLM: exit 2 here
    sink = _open_jsonl(jsonl)
    _print_envelope(watcher)
    try:
        _run(watcher, sink, write_workload)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a watch: the summary is printed, the exit code says what it saw
    finally:
        if sink is not None:
            sink.close()
    return 1 if any(r.alerts for r in watcher.reports) else 0


def _print_envelope(watcher: Monitor) -> None:
    from sweetspot.guard.checks import readable_slos

    envelope, tuned = watcher.envelope, watcher.tuned
    where = redact_url(watcher.settings.metrics_url)
    _out.print(f"watching {where} every {watcher.settings.interval_s:g} s", markup=False)
    if envelope is None:
        _out.print("no --baseline: windows are held to nothing but the server's health",
                   markup=False)
        return
    slos, unread = readable_slos(envelope)
    limits = ", ".join(f"{k} {v:g} ms" for k, v in slos.items()) or "no SLO"
    capacity = f"{envelope.capacity_rps:.2f} req/s" if envelope.capacity_rps else "unknown"
    _out.print(f"against {envelope.source}: {limits}; capacity {capacity}", markup=False)
    if tuned is not None:
        _out.print(f"tuned traffic ({tuned.name}): P50/P90 prompt {tuned.prompt_p50:,.0f}/"
                   f"{tuned.prompt_p90:,.0f} tokens, output {tuned.output_p50:,.0f}/"
                   f"{tuned.output_p90:,.0f}", markup=False)
    for key in unread:
        _err.print(f"warning: SLO {key} cannot be read from vLLM's histograms (P50, P90, P99): "
                   "not checked", markup=False)


def _open_jsonl(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    try:
        return path.open("a", buffering=1)
    except OSError as exc:
        raise SweetspotError(f"cannot write {path}: {exc.strerror or exc}") from None


def _run(watcher: Monitor, sink: IO[str] | None, workload_path: Path | None) -> None:
    """The watch, its windows printed and written as they close; the summary at the end
    (also on Ctrl-C: the finally runs before the interrupt goes on)."""
    from sweetspot.guard.monitor import summarize, watch
    from sweetspot.guard.render import summary_lines, summary_record

    view = _View()
    hinted = False

    def on_window(report: WindowReport) -> None:
        nonlocal hinted
        view.add(report)
        if sink is not None:
            sink.write(json.dumps(_record(report)) + "\n")
        if workload_path is not None and report.window.requests:
            _write_workload(watcher, workload_path)
        if not hinted and any(a.kind == "drift" for a in report.alerts):
            hinted = True
            where = (f"wrote {workload_path}: sweetspot tune --workload {workload_path}"
                     if workload_path is not None else
                     "--write-workload FILE writes it as a workload for sweetspot tune")
            _out.print(f"drift: the live traffic is not what was tuned on; {where}",
                       markup=False)

    try:
        with view:
            watch(watcher, on_window)
    finally:
        summary = summarize(watcher.reports)
        for line in summary_lines(summary, watcher.live_workload()):
            _out.print(line, markup=False)
        if sink is not None:
            sink.write(json.dumps(summary_record(summary)) + "\n")


def _record(report: WindowReport) -> dict[str, Any]:
    from sweetspot.guard.render import window_record

    return window_record(report)


def _write_workload(watcher: Monitor, path: Path) -> None:
    from sweetspot.guard.drift import write_workload

    data = watcher.live_workload()
    if data is not None:
        write_workload(path, data)


class _View:
    """A live table on a terminal; elsewhere (a pipe, a log file) one line per window and one
    per alert."""

    def __init__(self) -> None:
        self.live: Any = None
        self.rows: list[list[str]] = []

    def __enter__(self) -> _View:
        if _out.is_terminal:
            from rich.live import Live

            self.live = Live(self._table(), console=_out, auto_refresh=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def _table(self):
        from rich.table import Table

        from sweetspot.guard.render import COLUMNS

        table = Table(*COLUMNS, title="sweetspot monitor", title_justify="left")
        for row in self.rows[-20:]:
            table.add_row(*row)
        return table

    def add(self, report: WindowReport) -> None:
        from sweetspot.guard.render import COLUMNS, window_row

        row = window_row(report)
        self.rows.append(row)
        if self.live is not None:
            self.live.update(self._table(), refresh=True)
            return
        _out.print("  ".join(f"{c}={v}" for c, v in zip(COLUMNS[:-1], row[:-1], strict=True)),
                   markup=False)
        for alert in report.alerts:
            _out.print(f"  {alert.severity}: {alert.message}", markup=False)
