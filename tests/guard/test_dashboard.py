"""The Grafana dashboard export: it validates against Grafana's dashboard JSON Schema (vendored
in tests/guard/data, see its README; no network), its panels query the release's metric names
through a Prometheus data-source variable, and the envelope's numbers are its threshold lines."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sweetspot.guard.dashboard import dashboard_panels, render_dashboard, write_dashboard
from sweetspot.guard.rules import RuleOptions
from tests.guard.envelopes import FULL, OLD, SPARSE, STATS

DATA = Path(__file__).parent / "data"
SCHEMA = json.loads((DATA / "grafana-dashboard.jsonschema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
# The time-series panel plugin's own schema: its options and its fieldConfig's "custom" part.
PANEL = json.loads((DATA / "grafana-timeseries.jsonschema.json").read_text(encoding="utf-8"))
OPTIONS, CUSTOM = (jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}", **PANEL})
                   for name in ("Options", "FieldConfig"))


def _dashboard(envelope, options=None) -> dict:
    return render_dashboard(envelope, dashboard_panels(envelope, options))


@pytest.mark.parametrize("envelope", [FULL, SPARSE, OLD, STATS], ids=lambda e: e.source)
def test_the_dashboard_validates_against_grafanas_schema(envelope):
    dashboard = _dashboard(envelope)
    errors = list(VALIDATOR.iter_errors(dashboard))
    for panel in dashboard["panels"]:
        assert panel["type"] == "timeseries"
        errors += OPTIONS.iter_errors(panel["options"])
        errors += CUSTOM.iter_errors(panel["fieldConfig"]["defaults"]["custom"])
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def test_the_schema_check_is_live():
    """The vendored schema rejects what Grafana would not read: an unknown key, a panel
    without a type, a missing schemaVersion, a grid wider than 24 columns."""
    good = _dashboard(FULL)
    broken = [
        {**good, "panelz": []},
        {**good, "panels": [{k: v for k, v in good["panels"][0].items() if k != "type"}]},
        {k: v for k, v in good.items() if k != "schemaVersion"},
        {**good, "panels": [{**good["panels"][0], "gridPos": {"h": 8, "w": 30, "x": 0, "y": 0}}]},
    ]
    for dashboard in broken:
        assert list(VALIDATOR.iter_errors(dashboard))
    custom = good["panels"][0]["fieldConfig"]["defaults"]["custom"]
    assert list(CUSTOM.iter_errors({**custom, "thresholdsStyle": {"mode": "dotted"}}))
    assert list(OPTIONS.iter_errors({**good["panels"][0]["options"], "legend": {}}))


def _panel(dashboard: dict, title: str) -> dict:
    return next(p for p in dashboard["panels"] if p["title"].startswith(title))


def _lines(panel: dict) -> list[tuple[float, str]]:
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [(s["value"], s["color"]) for s in steps[1:]]  # the first is the base colour


def test_the_envelopes_numbers_are_threshold_lines():
    dashboard = _dashboard(FULL)
    ttft = _panel(dashboard, "Time to first token")
    assert _lines(ttft) == [(0.212, "orange"), (0.3, "red")]  # measured P99, then the SLO
    assert ttft["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    assert "SLO p99 300 ms" in ttft["description"]
    assert _lines(_panel(dashboard, "Requests per second")) == [(6.5, "orange"), (10.0, "red")]
    assert _lines(_panel(dashboard, "Requests running")) == [(128.0, "red")]
    assert _lines(_panel(dashboard, "KV-cache usage")) == [(0.72, "orange"), (1.0, "red")]
    assert _lines(_panel(dashboard, "Preemptions")) == [(0.25, "orange")]
    assert _lines(_panel(dashboard, "Tokens per second")) == [(1650.0, "orange")]


def test_without_numbers_there_are_no_lines_but_the_same_panels():
    full, sparse = _dashboard(FULL), _dashboard(SPARSE)
    assert [p["title"] for p in sparse["panels"]] == [p["title"] for p in full["panels"]]
    for panel in sparse["panels"]:
        expected = [(1.0, "red")] if panel["title"].startswith("KV-cache") else []
        assert _lines(panel) == expected, panel["title"]


def test_queries_use_the_releases_names_through_the_datasource_variable():
    dashboard = _dashboard(OLD)
    titles = [p["title"] for p in dashboard["panels"]]
    assert not any(t.startswith("Time per output token") for t in titles)  # no histogram
    itl = _panel(dashboard, "Inter-token latency")
    assert "vllm:time_per_output_token_seconds_bucket{job=\"vllm\"}" in itl["targets"][1]["expr"]
    assert itl["targets"][1]["expr"].startswith("histogram_quantile(0.99, sum by (le, job, ")
    variables = dashboard["templating"]["list"]
    assert variables == [{"type": "datasource", "name": "datasource", "label": "Prometheus",
                          "query": "prometheus", "refresh": 1, "hide": 0, "includeAll": False,
                          "multi": False}]
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
    new = json.dumps(_dashboard(FULL))
    assert "vllm:inter_token_latency_seconds_bucket" in new and "kv_cache_usage_perc" in new
    assert "time_per_output_token_seconds_bucket" not in new.replace("request_time_per", "")


def test_the_selector_and_labels_come_from_the_rule_options():
    options = RuleOptions(selector='namespace="prod"', target_labels=("pod",), model_label=None)
    panel = _panel(_dashboard(FULL, options), "Time to first token")
    assert panel["targets"][0]["expr"] == (
        'histogram_quantile(0.5, sum by (le, pod) (rate(vllm:time_to_first_token_seconds_bucket'
        '{namespace="prod"}[$__rate_interval])))')
    assert panel["targets"][0]["legendFormat"] == "P50 {{pod}}"


def test_write_dashboard_writes_json_that_reads_back_the_same(tmp_path):
    path = tmp_path / "dash.json"
    dashboard = write_dashboard(path, FULL)
    assert json.loads(path.read_text()) == dashboard == _dashboard(FULL)  # and deterministic
    assert [p.name for p in tmp_path.iterdir()] == ["dash.json"]
