"""``sweetspot compare a.json b.json``: two saved results, one run each.

A file is ``sweetspot bench --json`` (vLLM's result keys, sweetspot's additions beside them) or
``vllm bench serve --save-result``'s own JSON. One run each gives no interval for a throughput;
the latencies and failed requests get a paired bootstrap over requests where both files hold
per-request arrays (``bench --detailed``, or vLLM's ``--save-detailed``) of the same requests —
the same prompt lengths in the same order, as one seed draws them. Otherwise only the
differences are reported, undecided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweetspot._errors import SweetspotError
from sweetspot.guard.compare import ComparePlan, Comparison, SideRun, judge
from sweetspot.guard.requests import PerRequest
from sweetspot.guard.verdict import look_levels

__all__ = ["compare_files", "load_result"]

# The keys every bench result has: a file without them is not one.
_REQUIRED = ("completed", "failed", "output_throughput", "request_throughput")


def load_result(path: Path) -> dict[str, Any]:
    """A saved result, checked to be one (one clear error otherwise)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SweetspotError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweetspotError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise SweetspotError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SweetspotError(f"{path}: not a benchmark result (a JSON object with "
                             f"{', '.join(_REQUIRED)})")
    missing = [k for k in _REQUIRED if not isinstance(data.get(k), int | float)]
    if missing:
        raise SweetspotError(f"{path}: not a benchmark result (no {', '.join(missing)}); "
                             "write one with sweetspot bench --json or vllm bench serve "
                             "--save-result")
    return data


def _side(data: Mapping[str, Any], path: Path) -> SideRun:
    values = {k: float(v) for k, v in data.items()
              if isinstance(v, int | float) and not isinstance(v, bool)}
    server = data.get("server") or {}
    if isinstance(server.get("preemptions"), int | float):
        values["preemptions"] = float(server["preemptions"])
    memory = (data.get("trial") or {}).get("memory") or {}
    held = memory.get("device_bytes") or memory.get("host_rss_bytes")
    if isinstance(held, int | float):
        values["peak_memory_bytes"] = float(held)
    trial_status = (data.get("trial") or {}).get("status", "ok")
    if trial_status != "ok" or not data["completed"]:
        cause = (data.get("trial") or {}).get("cause") or "no request completed"
        return SideRun(str(trial_status if trial_status != "ok" else "crash"), cause, values)
    return SideRun("ok", None, values, PerRequest.from_json(data, str(path)))


def compare_files(path_a: Path, path_b: Path, plan: ComparePlan) -> Comparison:
    """B's result against A's (see the module docstring)."""
    data_a, data_b = load_result(path_a), load_result(path_b)
    a, b = _side(data_a, path_a), _side(data_b, path_b)
    notes = ["one run each: throughputs get no interval (repeats show the run-to-run "
             "variation; run compare on a backend or on two endpoints for them)"]
    if a.requests is None or b.requests is None:
        notes.append("no per-request data in both files (bench --json --detailed, or vLLM's "
                     "--save-detailed): latencies are not bootstrapped")
    elif data_a.get("input_lens") != data_b.get("input_lens"):
        notes.append("the files hold different requests (prompt lengths differ): they cannot "
                     "be paired, so latencies are not bootstrapped")
        a, b = SideRun(a.status, a.cause, a.values), SideRun(b.status, b.cause, b.values)
    one = ComparePlan(plan.guarded, plan.tolerances, 1, 1, plan.alpha, plan.goodput_ms,
                      plan.seed)
    pairs = ((a, b),)
    return Comparison(str(path_a), str(path_b), "files", pairs,
                      judge(pairs, one, look_levels(1, 1, plan.alpha)[1]), one,
                      notes=tuple(notes))
