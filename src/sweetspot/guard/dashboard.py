"""A Grafana dashboard from a tuning result: what ``monitor --emit-dashboard`` writes.

The same figures as the rules export (``guard/rules.py``), one time-series panel each, with the
envelope's numbers drawn as threshold lines: the SLO and the P99 the pick showed at its tuned
rate on each latency panel, its capacity and tuned rate on the request-rate panel, its batch
limit on the queue panel, and so on. A panel whose number the envelope lacks has no line for it;
a histogram the release does not export has no panel. Queries read the raw vLLM series (the
dashboard works without the recording rules) with the release's metric names, through a
Prometheus data-source variable.

Compute, then render: ``dashboard_panels`` gives plain ``PanelSpec``s, ``render_dashboard`` the
Grafana JSON model, ``write_dashboard`` the file (written atomically).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweetspot._files import write_text
from sweetspot.guard.baseline import Envelope
from sweetspot.guard.rules import RuleOptions
from sweetspot.metrics.prometheus import MetricNames, metric_names

__all__ = ["Line", "PanelSpec", "dashboard_panels", "render_dashboard", "write_dashboard"]

SCHEMA_VERSION = 39  # Grafana 10.4-11's dashboard JSON model
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_COLORS = {"limit": "red", "tuned": "orange", "reference": "blue"}
_LATENCY = (("ttft", "Time to first token"), ("itl", "Inter-token latency"),
            ("tpot", "Time per output token (per request)"), ("e2el", "End-to-end latency"),
            ("queue_time", "Queue time"))


@dataclass(frozen=True, slots=True)
class Line:
    """A threshold line on a panel, in the panel's unit."""

    value: float
    label: str  # what it is and where it came from, for the panel's description
    role: str  # limit (red) | tuned (orange): what the pick showed | reference (blue)


@dataclass(frozen=True, slots=True)
class PanelSpec:
    """One time-series panel: its queries (PromQL, legend) and its threshold lines."""

    title: str
    unit: str  # Grafana unit id
    queries: tuple[tuple[str, str], ...]
    lines: tuple[Line, ...] = ()
    description: str = ""


def dashboard_panels(envelope: Envelope, options: RuleOptions | None = None) -> list[PanelSpec]:
    """The panels for ``envelope``, in reading order: latencies, then load, then memory."""
    options = options or RuleOptions()
    names = metric_names(envelope.vllm_version)
    q = _Promql(options, names)
    panels = [_latency_panel(envelope, q, stat, title) for stat, title in _LATENCY
              if getattr(names, stat) is not None]
    return panels + _load_panels(envelope, q)


class _Promql:
    def __init__(self, options: RuleOptions, names: MetricNames) -> None:
        self.names, self.selector = names, options.selector
        self.by = ", ".join(options.by)
        self.legend = " ".join(f"{{{{{label}}}}}" for label in options.by)

    def sel(self, metric: str) -> str:
        return f"{metric}{{{self.selector}}}"

    def quantile(self, metric: str, q: float) -> str:
        return (f"histogram_quantile({q}, sum by (le, {self.by}) "
                f"(rate({self.sel(metric + '_bucket')}[$__rate_interval])))")

    def rate(self, counter: str) -> str:
        return f"sum by ({self.by}) (rate({self.sel(counter)}[$__rate_interval]))"

    def gauge(self, gauge: str, how: str) -> str:
        return f"{how} by ({self.by}) ({self.sel(gauge)})"


def _latency_panel(envelope: Envelope, q: _Promql, stat: str, title: str) -> PanelSpec:
    metric = getattr(q.names, stat)
    lines = []
    for key, limit_ms in envelope.slos.items():
        if key.endswith(f"_{stat}"):
            lines.append(Line(limit_ms / 1000, f"SLO {key.split('_')[0]} {limit_ms:g} ms",
                              "limit"))
    kind = "measured" if envelope.measured else "predicted"
    if stat in envelope.p99_ms:
        ms = envelope.p99_ms[stat]
        lines.append(Line(ms / 1000, f"P99 {kind} at the tuned rate, {ms:g} ms", "tuned"))
    return PanelSpec(
        title=f"{title} (P50, P99)", unit="s",
        queries=((q.quantile(metric, 0.5), f"P50 {q.legend}"),
                 (q.quantile(metric, 0.99), f"P99 {q.legend}")),
        lines=tuple(lines), description=f"{metric}: quantiles of the histogram's rate.",
    )


def _load_panels(envelope: Envelope, q: _Promql) -> list[PanelSpec]:
    n, e = q.names, envelope
    arrivals = (f"{q.rate(n.requests_finished)} + sum by ({q.by}) (deriv("
                f"{q.sel(n.waiting)}[$__rate_interval])) + sum by ({q.by}) (deriv("
                f"{q.sel(n.running)}[$__rate_interval]))")
    return [
        PanelSpec("Requests per second", "reqps",
                  ((q.rate(n.requests_finished), f"finished {q.legend}"),
                   (arrivals, f"arrived {q.legend}")),
                  _lines((e.capacity_rps, "capacity (steady state)", "limit"),
                         (e.offered_rate, "the tuned rate", "tuned")),
                  "Arrived: finished plus the growth of the requests in the server."),
        PanelSpec("Tokens per second", "short",
                  ((q.rate(n.prompt_tokens), f"prompt {q.legend}"),
                   (q.rate(n.generation_tokens), f"generated {q.legend}")),
                  _lines((e.output_throughput, "output tokens/s at the tuned rate", "tuned"))),
        PanelSpec("Preemptions per second", "short",
                  ((q.rate(n.preemptions), q.legend),),
                  _lines((e.preemptions_per_s, "at the tuned rate", "tuned"))),
        PanelSpec("KV-cache usage (fullest engine)", "percentunit",
                  ((q.gauge(n.kv_usage, "max"), q.legend),),
                  _lines((e.peak_kv_usage, "peak at the tuned rate", "tuned"),
                         (1.0, "full: vLLM preempts", "limit"))),
        PanelSpec("Requests running and waiting", "short",
                  ((q.gauge(n.running, "sum"), f"running {q.legend}"),
                   (q.gauge(n.waiting, "sum"), f"waiting {q.legend}")),
                  _lines((e.max_num_seqs, "max-num-seqs (one batch)", "limit"))),
        PanelSpec("Server up", "short", ((f"up{{{q.selector}}}", "{{instance}}"),)),
    ]


def _lines(*lines: tuple[float | None, str, str]) -> tuple[Line, ...]:
    return tuple(Line(float(v), f"{label}: {v:g}", role) for v, label, role in lines
                 if v is not None)


def render_dashboard(envelope: Envelope, panels: list[PanelSpec]) -> dict[str, Any]:
    """Grafana's dashboard JSON model (``schemaVersion`` 39) for ``panels``."""
    source = " ".join(envelope.source.split())
    uid = "sweetspot-" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return {
        "uid": uid,
        "title": f"vLLM against its tuning: {source}"[:120],
        "description": (f"Built by sweetspot from {source} ("
                        f"{'measured' if envelope.measured else 'predicted'}); vLLM "
                        f"{envelope.vllm_version or 'current'}, model {envelope.model or 'any'}."),
        "tags": ["vllm", "sweetspot"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "templating": {"list": [{
            "type": "datasource", "name": "datasource", "label": "Prometheus",
            "query": "prometheus", "refresh": 1, "hide": 0, "includeAll": False, "multi": False,
        }]},
        "annotations": {"list": []},
        "panels": [_panel(i, p) for i, p in enumerate(panels)],
    }


def _panel(index: int, spec: PanelSpec) -> dict[str, Any]:
    # Grafana takes the first step as the base colour (its value is read as -Infinity; the
    # schema wants a number, so 0 stands for it); the others draw as lines.
    steps = [{"color": "green", "value": 0}]
    steps += [{"color": _COLORS[line.role], "value": line.value}
              for line in sorted(spec.lines, key=lambda line: line.value)]
    notes = "; ".join(line.label for line in spec.lines)
    description = " ".join(filter(None, (spec.description, f"Lines: {notes}." if notes else "")))
    return {
        "type": "timeseries",
        "id": index + 1,
        "title": spec.title,
        "description": description,
        "datasource": dict(_DATASOURCE),
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "targets": [{"refId": chr(ord("A") + i), "datasource": dict(_DATASOURCE), "expr": expr,
                     "legendFormat": legend, "range": True}
                    for i, (expr, legend) in enumerate(spec.queries)],
        "fieldConfig": {
            "defaults": {
                "unit": spec.unit,
                "min": 0,
                "color": {"mode": "palette-classic"},
                "thresholds": {"mode": "absolute", "steps": steps},
                "custom": {"thresholdsStyle": {"mode": "dashed" if spec.lines else "off"},
                           "drawStyle": "line", "lineWidth": 1, "fillOpacity": 0,
                           "spanNulls": False},
            },
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True,
                               "calcs": []},
                    "tooltip": {"mode": "multi", "sort": "none"}},
    }


def write_dashboard(path: Path | str, envelope: Envelope,
                    options: RuleOptions | None = None) -> dict[str, Any]:
    """Write the dashboard for ``envelope`` to ``path`` (whole or not at all); return it."""
    dashboard = render_dashboard(envelope, dashboard_panels(envelope, options))
    write_text(path, json.dumps(dashboard, indent=2) + "\n")
    return dashboard
