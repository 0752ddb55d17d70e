"""The report from a synthetic study: files, self-contained HTML, CSV, figures and their data."""

from __future__ import annotations

import base64
import copy
import csv
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import sweetspot.report
from sweetspot.report import (
    build_report,
    knob_gains_data,
    max_model_len_data,
    pareto_data,
    pick_rows,
    picks_data,
    policy_latency_data,
    speculative_data,
    sweep_data,
    terminal_tables,
)
from sweetspot.report.study import knob_axis_label
from sweetspot.tune.result import StudyResult

GIB = 2**30
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE_CONFIG = {
    "max_num_seqs": 256, "max_model_len": 8192, "enable_prefix_caching": True,
    "scheduling_policy": "fcfs", "speculative": None,
}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
EAGLE = {"method": "eagle", "model": "org/EAGLE-draft", "num_speculative_tokens": 2}


def trial(number, phase, knob, changes, status="ok", thr=None, e2el=None, ttft=250.0, tpot=40.0,
          mem_gib=70.0, cause=None):
    ok = status == "ok"
    metrics = {} if not ok else {
        "output_throughput": thr, "request_throughput": thr / 200, "total_token_throughput":
        thr * 2.5, "median_ttft_ms": ttft / 2, "p99_ttft_ms": ttft, "mean_tpot_ms": tpot * 0.8,
        "median_tpot_ms": tpot * 0.7, "p99_tpot_ms": tpot, "median_e2el_ms": e2el / 2,
        "p99_e2el_ms": e2el, "mean_e2el_ms": e2el / 2,
    }
    return {
        "number": number, "phase": phase, "knob": knob, "config": {**BASE_CONFIG, **changes},
        "status": status, "cause": cause, "metrics": metrics,
        "memory_bytes": int(mem_gib * GIB) if ok else None,
        "kv_cache_tokens": 120_000 if ok else None, "slo_ok": ok and ttft <= 300,
        "facts": {"preemptions": 0, "peak_kv_usage": 0.4, "mean_batch": 40.2} if ok else {},
    }


def typed(data: dict) -> StudyResult:
    """The report's input: the study as ``sweetspot tune`` hands it over, from its JSON form."""
    return StudyResult.from_dict(data)


def make_study() -> dict:
    """The study's JSON (as ``study_data`` writes it), for tests to change before ``typed``."""
    trials = [
        trial(0, "baseline", None, {}, thr=1000.0, e2el=8000.0),
        trial(1, "ofat", "max_num_seqs", {"max_num_seqs": 128}, thr=800.0, e2el=6000.0),
        trial(2, "ofat", "max_num_seqs", {"max_num_seqs": 512}, thr=1200.0, e2el=9000.0),
        trial(3, "ofat", "max_num_seqs", {"max_num_seqs": 1024}, status="oom",
              cause="CUDA out of memory while capturing graphs"),
        trial(4, "ofat", "max_model_len", {"max_model_len": 4096}, thr=1100.0, e2el=7900.0,
              mem_gib=72.0),
        trial(5, "ofat", "max_model_len", {"max_model_len": 16384}, thr=900.0, e2el=8500.0,
              mem_gib=68.0),
        trial(6, "ofat", "max_model_len", {"max_model_len": 65536}, status="invalid",
              cause="max_model_len > max_position_embeddings <32768>"),
        trial(7, "ofat", "scheduling_policy", {"scheduling_policy": "priority"}, thr=990.0,
              e2el=8100.0, ttft=200.0),
        trial(8, "ofat", "speculative", {"speculative": NGRAM}, thr=1150.0, e2el=5000.0,
              tpot=30.0),
        trial(9, "ofat", "speculative", {"speculative": EAGLE}, thr=1050.0, e2el=5500.0,
              tpot=32.0),
        trial(10, "combined", None, {"max_num_seqs": 512, "max_model_len": 4096}, thr=1300.0,
              e2el=7000.0),
        trial(11, "optuna", None, {"max_num_batched_tokens": 8192}, thr=1010.0, e2el=7950.0),
    ]
    cmd_throughput = "vllm serve qwen --max-num-seqs 512 --max-model-len 4096"
    cmd_latency = ("vllm serve qwen --speculative-config "
                   "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'")
    return {
        "study": "chat-a100", "storage": "sqlite:///.sweetspot/studies.db",
        "model": "qwen2.5-14b", "gpu": "a100-80gb", "vllm_version": "0.33.0",
        "workload": "chat", "backend": "sim", "objective": "output_throughput",
        "slos": {"p99_ttft_ms": 300.0, "p99_tpot_ms": 50.0},
        "baseline": 0,
        "trials": trials,
        "picks": [
            {"goal": "max-throughput", "trial": 10,
             "gain": {"output_throughput": 0.30, "p99_e2el_ms": -0.125, "memory_bytes": 0.0286},
             "reasons": ["KV-bound at 96 concurrent requests"], "command": cmd_throughput,
             "yaml": "model: qwen\nmax-num-seqs: 512\n"},
            {"goal": "low-latency", "trial": 8, "gain": {"p99_e2el_ms": -0.375},
             "reasons": ["decode-bound: drafts accepted <70 %>"], "command": cmd_latency,
             "yaml": ""},
            {"goal": "balanced", "trial": 10, "gain": {}, "reasons": [],
             "command": cmd_throughput, "yaml": ""},
        ],
        "pareto": [10, 8, 1],
        "confirmation": {"verdict": "winner", "text": "max-throughput beats baseline by 30 %"},
    }


ALL_PNGS = {
    "max_model_len.png", "policy_latency.png", "speculative.png", "knob_gains.png", "picks.png",
    "pareto.png", "sweep_max_num_seqs.png", "sweep_max_model_len.png",
    "sweep_scheduling_policy.png", "sweep_speculative.png",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    study = make_study()
    files = build_report(typed(study), tmp_path_factory.mktemp("report"))
    return study, files


def test_every_file_is_written(built):
    _, files = built
    for path in (files.html, files.trials_json, files.trials_csv, files.picks_json, *files.pngs):
        assert path.is_file() and path.stat().st_size > 0
    assert {p.name for p in files.pngs} == ALL_PNGS
    assert all(p.parent == files.html.parent for p in files.pngs)


def test_pngs_are_png(built):
    _, files = built
    for path in files.pngs:
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_html_is_self_contained_and_embeds_every_png(built):
    _, files = built
    page = files.html.read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(?!data:)[a-z]+:""", page)
    assert "<script" not in page.lower()
    assert page.count("data:image/png;base64,") == len(files.pngs)
    for path in files.pngs:
        assert base64.b64encode(path.read_bytes()).decode() in page


def test_html_shows_header_slos_picks_and_tables(built):
    study, files = built
    page = files.html.read_text(encoding="utf-8")
    for text in ("chat-a100", "qwen2.5-14b", "a100-80gb", "0.33.0", "chat", "sim",
                 "P99 TTFT ≤ 300 ms", "P99 TPOT ≤ 50 ms", "Confirmation: winner"):
        assert text in page
    for pick in study["picks"]:
        assert f"<pre>{html.escape(pick['command'])}</pre>" in page
    assert html.escape("drafts accepted <70 %>") in page and "<70 %>" not in page
    assert "+30.0 % output throughput, -12.5 % P99 E2EL, +2.9 % memory" in page
    assert "max_num_seqs 256→512, max_model_len 8192→4096" in page
    assert html.escape("max_position_embeddings <32768>") in page
    for knob in ("max_num_seqs", "max_model_len", "scheduling_policy", "speculative"):
        assert f"<h3>{knob}</h3>" in page
    assert "1,200.0" in page and "oom" in page


def test_csv_has_a_row_per_trial_and_a_column_per_knob(built):
    study, files = built
    with files.trials_csv.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(study["trials"])
    header = list(rows[0])
    assert header[:5] == ["number", "phase", "knob", "status", "cause"]
    assert header[-3:] == ["memory_bytes", "kv_cache_tokens", "slo_ok"]
    for knob in (*BASE_CONFIG, "max_num_batched_tokens"):  # the last one only trial 11 sets
        assert knob in header
    for name in ("output_throughput", "p99_e2el_ms", "mean_tpot_ms"):
        assert name in header
    assert rows[11]["max_num_batched_tokens"] == "8192" and rows[0]["max_num_batched_tokens"] == ""
    assert json.loads(rows[8]["speculative"]) == NGRAM
    assert rows[0]["speculative"] == "" and rows[0]["enable_prefix_caching"] == "true"
    assert rows[3]["status"] == "oom" and rows[3]["output_throughput"] == ""
    assert float(rows[2]["output_throughput"]) == 1200.0
    assert rows[0]["memory_bytes"] == str(70 * GIB)


def test_json_exports(built):
    study, files = built
    saved = json.loads(files.trials_json.read_text())
    assert saved == typed(study).to_dict()
    assert typed(saved).to_dict() == saved  # a saved report reads back as the study it was
    picks = json.loads(files.picks_json.read_text())
    assert picks["baseline"]["trial"] == 0
    assert [p["goal"] for p in picks["picks"]] == ["max-throughput", "low-latency", "balanced"]
    first = picks["picks"][0]
    assert first["config"]["max_num_seqs"] == 512 and first["status"] == "ok"
    assert first["changes"] == "max_num_seqs 256→512, max_model_len 8192→4096"
    assert first["command"] == study["picks"][0]["command"]


def test_knob_gains_are_percent_over_baseline_best_first():
    gains = knob_gains_data(typed(make_study()))
    assert [(g.knob, g.label, g.trial) for g in gains] == [
        ("max_num_seqs", "512", 2),
        ("speculative", "ngram k=3", 8),
        ("max_model_len", "4096", 4),
        ("scheduling_policy", "priority", 7),
    ]
    assert [g.gain_pct for g in gains] == pytest.approx([20.0, 15.0, 10.0, -1.0])


def test_sweep_orders_values_marks_baseline_and_failures():
    sweep = sweep_data(typed(make_study()), "max_num_seqs")
    assert sweep.numeric and sweep.log_x
    assert [p.value for p in sweep.points] == [128, 256, 512, 1024]
    assert [p.is_baseline for p in sweep.points] == [False, True, False, False]
    assert [p.status for p in sweep.points] == ["ok", "ok", "ok", "oom"]
    assert sweep.points[3].output_throughput is None
    assert sweep.points[1].memory_gib == pytest.approx(70.0)

    spec = sweep_data(typed(make_study()), "speculative")
    assert not spec.numeric
    assert [p.label for p in spec.points] == ["off", "ngram k=3", "eagle k=2 model=EAGLE-draft"]
    assert sweep_data(typed(make_study()), "block_size") is None


def test_sweep_keeps_one_point_per_value_baseline_first():
    study = make_study()
    study["trials"].append(trial(12, "ofat", "max_num_seqs", {"max_num_seqs": 256}, thr=5.0,
                                 e2el=1.0))
    sweep = sweep_data(typed(study), "max_num_seqs")
    (point,) = [p for p in sweep.points if p.value == 256]
    assert point.is_baseline and point.trial == 0


def test_max_model_len_data_keeps_ok_points_with_memory():
    data = max_model_len_data(typed(make_study()))
    assert [p.value for p in data.points] == [4096, 8192, 16384]  # 65536 was invalid
    assert [p.output_throughput for p in data.points] == [1100.0, 1000.0, 900.0]
    assert [p.memory_gib for p in data.points] == pytest.approx([72.0, 70.0, 68.0])


def test_policy_latency_data():
    data = policy_latency_data(typed(make_study()))
    assert [(p.label, p.p99_ttft_ms, p.p99_e2el_ms) for p in data.points] == [
        ("fcfs", 250.0, 8000.0), ("priority", 200.0, 8100.0)]


def test_speculative_data_compares_with_no_speculation():
    data = speculative_data(typed(make_study()))
    assert data.reference == "off" and data.tpot_metric == "mean_tpot_ms"
    assert [s.label for s in data.setups] == ["off", "ngram k=3", "eagle k=2 model=EAGLE-draft"]
    ngram = data.setups[1]
    assert ngram.throughput_change == pytest.approx(0.15)
    assert ngram.tpot_ms == pytest.approx(24.0)
    assert ngram.tpot_change == pytest.approx(-0.25)
    assert ngram.p99_tpot_change == pytest.approx(-0.25)
    assert data.setups[0].throughput_change == 0.0


def test_speculative_falls_back_to_median_tpot():
    study = make_study()
    for t in study["trials"]:
        t["metrics"].pop("mean_tpot_ms", None)
    assert speculative_data(typed(study)).tpot_metric == "median_tpot_ms"


def test_pareto_data_uses_the_study_front_failures_and_goals():
    data = pareto_data(typed(make_study()))
    assert [p.trial for p in data.front] == [1, 8, 10]  # the tuner's list, by throughput
    assert data.failed == ((3, "oom"), (6, "invalid"))
    assert len(data.points) == 10
    goals = {p.trial: p.goals for p in data.points if p.goals}
    assert goals == {10: ("max-throughput", "balanced"), 8: ("low-latency",)}

    study = make_study()
    del study["pareto"]  # stopped before the tuner chose: computed here
    assert [p.trial for p in pareto_data(typed(study)).front] == [8, 10]  # 8 dominates 1
    study["trials"][8]["over_capacity"] = True  # no latency to compare: off the front
    assert [p.trial for p in pareto_data(typed(study)).front] == [9, 10]


def test_pareto_labels_name_goals_once_per_trial_and_flag_over_capacity():
    study = make_study()
    study["trials"].append(copy.deepcopy(study["trials"][0]))  # a trial listed twice
    study["trials"][8]["over_capacity"] = True
    data = pareto_data(typed(study))
    assert len(data.points) == 10
    labels = {p.trial: p.label for p in data.points if p.label}
    assert labels == {10: "max-throughput, balanced (#10)", 8: "low-latency (#8)"}
    assert [p.trial for p in data.points if p.over_capacity] == [8]


def test_knob_axis_labels_carry_units():
    assert knob_axis_label("max_model_len") == "max_model_len (tokens)"
    assert knob_axis_label("gpu_memory_utilization") == (
        "gpu_memory_utilization (share of device memory)")
    assert knob_axis_label("enable_prefix_caching") == "enable_prefix_caching"


def test_picks_data_and_rows_put_the_baseline_first():
    study = make_study()
    (throughput, *_) = picks_data(typed(study)).panels
    assert [(b.goal, b.trial, b.value) for b in throughput.bars] == [
        ("baseline", 0, 1000.0), ("max-throughput", 10, 1300.0), ("low-latency", 8, 1150.0),
        ("balanced", 10, 1300.0)]
    rows = pick_rows(typed(study))
    assert rows[0].goal == "baseline" and rows[0].changes == "" and rows[0].gains == ()
    assert rows[2].changes == "speculative off→ngram k=3"
    assert dict(rows[3].gains) == pytest.approx({"output_throughput": 0.3,
                                                 "p99_e2el_ms": -0.125})  # computed: empty gain


def test_study_without_speculative_trials_skips_that_figure(tmp_path):
    study = make_study()
    study["trials"] = [t for t in study["trials"] if t["knob"] != "speculative"]
    study["picks"] = [p for p in study["picks"] if p["trial"] != 8]
    study["pareto"] = [10, 1]
    files = build_report(typed(study), tmp_path)
    names = {p.name for p in files.pngs}
    assert names == ALL_PNGS - {"speculative.png", "sweep_speculative.png"}
    assert not (tmp_path / "speculative.png").exists()
    assert speculative_data(typed(study)) is None


def test_baseline_only_study_builds_with_fewer_figures(tmp_path):
    study = make_study()
    study.update(trials=study["trials"][:1], picks=[], pareto=[0], confirmation=None, slos={})
    files = build_report(typed(study), tmp_path / "out")
    assert files.pngs == ()
    page = files.html.read_text(encoding="utf-8")
    assert "SLOs:</b> none" in page and "No picks" in page
    with files.trials_csv.open(newline="") as f:
        assert len(list(csv.reader(f))) == 2
    assert [t.title for t in terminal_tables(typed(study))] == ["Picks — chat-a100"]


def test_empty_study_builds(tmp_path):
    files = build_report(typed({"study": "empty", "trials": []}), tmp_path)
    assert files.pngs == () and "nothing to compare" in files.html.read_text()
    assert terminal_tables(typed({"trials": []})) == []


def test_storage_password_is_masked(tmp_path):
    study = make_study()
    study["storage"] = "postgresql://tuner:s3cret@db.local:5432/studies"
    study["trials"] = study["trials"][:1]
    result = typed(study)
    files = build_report(result, tmp_path)
    for path in (files.trials_json, files.html):
        text = path.read_text()
        assert "s3cret" not in text and "tuner:***@db.local:5432" in text
    assert result.storage.endswith("s3cret@db.local:5432/studies")  # input left alone


def test_build_does_not_change_the_study(tmp_path):
    study = typed(make_study())
    before = copy.deepcopy(study.to_dict())  # frozen, but its JSON parts hold dicts
    build_report(study, tmp_path)
    assert study.to_dict() == before


def test_terminal_tables_picks_then_one_per_knob():
    tables = terminal_tables(typed(make_study()))
    assert [t.title for t in tables] == [
        "Picks — chat-a100", "What each pick changes", "max_num_seqs (one knob at a time)",
        "max_model_len (one knob at a time)", "scheduling_policy (one knob at a time)",
        "speculative (one knob at a time)"]
    assert [t.row_count for t in tables[:3]] == [4, 3, 4]
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for table in tables:
        console.print(table)
    text = console.export_text()
    assert "256 (baseline)" in text and "1,200.0" in text and "oom" in text
    assert "+30.0 % output throughput" in text


def test_importing_the_package_does_not_load_matplotlib():
    code = "import sys, sweetspot.report; assert 'matplotlib' not in sys.modules"
    src = str(Path(sweetspot.report.__file__).parents[2])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})


def test_public_names_are_exported_and_sorted():
    names = sweetspot.report.__all__
    assert all(hasattr(sweetspot.report, name) for name in names)
    classes = [n for n in names if n[0].isupper()]
    functions = [n for n in names if n[0].islower()]
    assert names == sorted(classes) + sorted(functions)
