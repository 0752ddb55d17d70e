"""Terminal tables fit an 80-column terminal without breaking a number."""

from __future__ import annotations

import io
import re

from rich.console import Console

from sweetspot.report import pick_rows, terminal_tables
from sweetspot.report.tables import picks_changes_table, picks_numbers_table
from tests.report.test_report import make_study, trial, typed

DRAFT = {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct",
         "num_speculative_tokens": 4}
LOOKUP = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
          "prompt_lookup_max": 4}


def crowded_study() -> dict:
    """The test study with the widest cells a real study makes: long speculative setups, a
    five-knob pick, five gains, five-digit latencies, an over-capacity pick, a rate search."""
    study = make_study()
    study["trials"] += [
        trial(12, "ofat", "speculative", {"speculative": LOOKUP}, thr=1419.0, e2el=46_577.3),
        trial(13, "ofat", "speculative", {"speculative": DRAFT}, thr=1411.6, e2el=46_912.4),
        trial(14, "optuna", None, {"max_num_seqs": 32, "max_model_len": 3072,
                                   "gpu_memory_utilization": 0.9, "speculative": DRAFT,
                                   "max_num_batched_tokens": 8192},
              thr=12_586.8, e2el=124_508.2, ttft=17_093.0, mem_gib=71.8),
    ]
    study["trials"][-1]["over_capacity"] = True
    study["picks"].append({"goal": "memory-limited", "trial": 14, "gain": {
        "output_throughput": 11.5868, "p99_e2el_ms": 14.56, "p99_ttft_ms": 67.372,
        "p99_tpot_ms": -0.795, "memory_bytes": -0.022}})
    probes = [{"rate": r, "ok": r < 6, "status": "ok", "cause": None, "missed": [] if r < 6
               else ["p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms"],
               "metrics": {"p99_ttft_ms": 221.6 * r**3, "p99_tpot_ms": 10.4 * r,
                           "p99_e2el_ms": 8_691.9 * r**2}} for r in (1.52, 3.05, 6.09, 7.62)]
    probes[-1]["metrics"]["p99_e2el_ms"] = 1_234_567.8  # an hour-long queue at the last rate
    probes.append({"rate": 9.5, "ok": False, "status": "crash", "missed": [], "metrics": {},
                   "cause": "the server exited with code -9 (killed: out of host memory)"})
    study["rate_search"] = {"trial": 0, "capacity_rps": 7.62, "slos": {"p99_ttft_ms": 2000.0},
                            "rounds": 1, "max_rate": 3.05, "limited_by": ["p99_ttft_ms"],
                            "probes": probes}
    return study


def render(tables, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    for table in tables:
        console.print(table, crop=False)  # a line too long shows, not cut at the edge
    return console.export_text()


def cell_strings(table) -> list[str]:
    return [str(cell) for column in table.columns for cell in column.cells]


def test_report_tables_fit_80_columns_and_keep_every_number_whole():
    tables = terminal_tables(typed(crowded_study()))
    text = render(tables)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    numbers = {tok for t in tables for cell in cell_strings(t) for tok in cell.split()
               if re.search(r"\d", tok)}
    assert len(numbers) > 50
    for number in numbers:  # each printed whole on one line, never split by wrapping
        assert any(number in line for line in lines), number


def test_picks_numbers_then_changes():
    study = crowded_study()
    titles = [t.title for t in terminal_tables(typed(study))]
    assert titles[:3] == ["Picks — chat-a100", "What each pick changes",
                          "Goodput: trial 0 at rising request rates"]
    text = render([picks_numbers_table(pick_rows(typed(study)), "s")])
    (row,) = [line for line in text.splitlines() if "memory-limited" in line]
    assert re.findall(r"[\d,.]+\*?", row) == ["14", "12,586.8", "17,093.0*", "40.0*",
                                               "124,508.2*", "71.8"]
    assert "* measured above the trial's capacity" in text
    changes = render([picks_changes_table(pick_rows(typed(study)))])
    assert "speculative off→draft_model" in changes and "+6737.2 % P99 TTFT" in changes
    assert "model=Qwen2.5-0.5B-Instruct" in changes
    assert "baseline" not in changes.split("\n", 3)[3]  # the baseline changes nothing


def test_no_over_capacity_note_when_every_latency_is_comparable():
    text = render(terminal_tables(typed(make_study())))
    assert "*" not in text and "measured above" not in text
