"""A search's trials made into the study's picks, each goal's configuration final.

First the reverted configurations: each pick's changed knobs set back, one at a time, to the
baseline's value, so that a change that buys nothing keeps the user's value (the picks prefer
the fewest changes within the resolution). Then the picks, chosen from every trial, and the
max-throughput one confirmed by paired runs against the baseline (or the runner-up): a tie or a
loss keeps the baseline.
"""

from __future__ import annotations

from collections.abc import Callable

from sweetspot.spec.hardware import GiB
from sweetspot.spec.knobs import ServingConfig
from sweetspot.tune.confirm import Confirmation, confirm_finalists
from sweetspot.tune.evaluate import Evaluator
from sweetspot.tune.picks import (
    RESOLUTION,
    Pick,
    candidates,
    changed_knobs,
    choose_picks,
    latency_keys,
    reasons_for,
    rivals,
)
from sweetspot.tune.result import TrialResult
from sweetspot.tune.settings import StudySettings
from sweetspot.tune.space import config_key
from sweetspot.tune.tuner import Tuner, config_from_json

__all__ = ["SIMPLIFY_TRIALS", "finalize_picks"]

# Reverted configurations (a changed knob set back to the baseline's value) a study runs so that
# a pick keeps the user's value where the change buys nothing: measured trials cost a server
# start each.
SIMPLIFY_TRIALS = {"sim": 32, "measured": 4}


def finalize_picks(settings: StudySettings, tuner: Tuner, evaluator: Evaluator,
                   base_row: TrialResult | None, kind: str,
                   on_phase: Callable[[str], None] | None,
                   ) -> tuple[list[Pick], Confirmation | None]:
    """Each goal's pick, once the reverted configurations ran (and the search went on with
    what they left of the reserve: ``tuner`` has the whole budget again), and the paired
    runs' confirmation of the max-throughput one. ``kind``: "sim" or "measured"."""
    resolution = RESOLUTION[kind]
    limit = int(settings.memory_limit_gib * GiB) if settings.memory_limit_gib else None
    offered = evaluator.offered_rate
    if on_phase is not None:
        on_phase("keeping your values where a change buys nothing")
    _simplify(tuner, base_row, offered, limit, resolution, settings.slos, SIMPLIFY_TRIALS[kind])
    if not tuner.exhausted():  # the reserve was not all needed: search on with it
        tuner.run(settings.strategy)
        _simplify(tuner, base_row, offered, limit, resolution, settings.slos,
                  SIMPLIFY_TRIALS[kind])

    picks = choose_picks(tuner.ordered_rows(), base_row, offered, limit,
                         resolution=resolution, slos=settings.slos,
                         acceptance=_acceptance_text(settings))
    if on_phase is not None:
        on_phase("confirming finalists")
    finalists = _finalists(picks, tuner.ordered_rows(), base_row)
    confirmation = confirm_finalists(evaluator, finalists, settings.confirm_repeats,
                                     pairs=getattr(tuner.executor, "pairs", None))
    picks = _confirmed(picks, confirmation, base_row, tuner.ordered_rows(), resolution)
    uncertainty = getattr(evaluator.backend, "uncertainty", None)
    if kind == "sim" and uncertainty is not None:
        picks = _name_rivals(picks, tuner.ordered_rows(), settings.slos, uncertainty())
    return picks, confirmation


def _figure(goal: str, row: TrialResult, slos: dict) -> str:
    """A rival's figure for ``goal``, in words."""
    if goal == "low-latency":
        return ", ".join(f"{key.split('_')[0].upper()} {key.split('_')[1].upper()} "
                         f"{row.metrics[key]:,.1f} ms" for key in latency_keys(slos)
                         if key in row.metrics)
    return f"{row.throughput:,.0f} tok/s"


def _name_rivals(picks: list[Pick], rows: list[TrialResult], slos: dict,
                 uncertainty) -> list[Pick]:
    """Each simulated pick with the trials its intervals cannot separate it from, named in
    its reasons: the configurations to measure on the GPU before betting on the ranking."""
    out = []
    for pick in picks:
        near = rivals(pick, rows, slos, uncertainty.relative)
        if near:
            names = ", ".join(f"trial {r.number} ({_figure(pick.goal, r, slos)})" for r in near)
            pick = Pick(pick.goal, pick.row, pick.gain, (
                *pick.reasons,
                f"within the simulator's uncertainty (steps ±{uncertainty.relative:.0%}: "
                f"{uncertainty.basis}) of {names}: measure them before betting on the "
                "ranking (sweetspot compare, or tune --backend vllm over them)"),
                tuple(r.number for r in near if r.number is not None))
        out.append(pick)
    return out


def _simplify(tuner: Tuner, base_row: TrialResult | None, offered: float | None,
              limit: int | None,
              resolution: float, slos: dict, max_trials: int) -> None:
    """Run, for each goal's pick, the configurations with one changed knob set back to the
    baseline's value, so that a knob whose change buys nothing can keep the user's value (the
    picks prefer the fewest changes within the resolution). Rounds until nothing new is
    proposed, ``max_trials`` ran or the study's budget is spent."""
    if base_row is None:
        return
    ran = 0
    tried: set[str] = set()
    while ran < max_trials:
        proposals = []
        for reverted in _reversions(tuner.ordered_rows(), base_row, offered, limit, resolution,
                                    slos):
            key = config_key(reverted)
            if key not in tried and key not in tuner.rows:
                tried.add(key)
                proposals.append(reverted)
        if not proposals:
            return
        for config in proposals[:max_trials - ran]:  # a round's trials in flight at once
            if tuner.exhausted():
                break
            tuner.request(config, "simplify")
            ran += 1
        tuner.drain()
        if tuner.exhausted():
            return


def _reversions(rows: list[TrialResult], base_row: TrialResult, offered: float | None,
                limit: int | None, resolution: float, slos: dict) -> list[ServingConfig]:
    """Each goal's pick among ``rows`` with one of its changed knobs set back to the
    baseline's value, pick by pick."""
    base_config = base_row.config
    out = []
    for pick in choose_picks(rows, base_row, offered, limit, resolution=resolution, slos=slos):
        for knob in changed_knobs(pick.row, base_config):
            config = dict(pick.row.config)
            if knob in base_config:
                config[knob] = base_config[knob]
            else:
                config.pop(knob, None)
            out.append(config_from_json(config))
    return out


def _finalists(picks: list[Pick], rows: list[TrialResult], base_row: TrialResult | None
               ) -> list[tuple[TrialResult, ServingConfig]]:
    """The max-throughput pick against the baseline (is the change worth it?), or, when the
    pick is the baseline, against the runner-up."""
    best = next((p.row for p in picks if p.goal == "max-throughput"), None)
    if best is None:
        return []
    other = base_row if base_row is not None and base_row.number != best.number \
        and base_row in candidates([base_row]) else None
    if other is None:
        pool = sorted((r for r in candidates(rows) if r.number != best.number),
                      key=lambda r: -r.throughput)
        other = pool[0] if pool else None
    if other is None:
        return []
    return [(r, config_from_json(r.config)) for r in (best, other)]


def _confirmed(picks: list[Pick], confirmation: Confirmation | None,
               base_row: TrialResult | None, rows: list[TrialResult],
               resolution: float) -> list[Pick]:
    """The paired verdict decides the max-throughput pick against the baseline: a tie (or a
    loss) keeps the baseline, a win says by how much."""
    if confirmation is None or base_row is None:
        return picks
    out = []
    for pick in picks:
        against_baseline = (pick.goal == "max-throughput"
                            and pick.row.number != base_row.number
                            and set(confirmation.numbers) == {pick.row.number,
                                                              base_row.number})
        if against_baseline and (confirmation.verdict == "tie"
                                 or confirmation.numbers[0] == base_row.number):
            reasons = reasons_for(pick.goal, base_row, base_row, rows, resolution=resolution)
            pick = Pick(pick.goal, base_row, {}, (
                *reasons, f"no measurable gain from trial {pick.row.number}'s changes: "
                          f"{confirmation.text()}"))
        elif against_baseline:
            pick = Pick(pick.goal, pick.row, pick.gain,
                        (*pick.reasons, f"confirmed: {confirmation.text()}"))
        out.append(pick)
    return out


def _acceptance_text(settings: StudySettings) -> Callable[[TrialResult], str | None]:
    """What a speculating pick's numbers rest on: the acceptance assumed (simulated) or the
    one the server counted (measured)."""
    def describe(row: TrialResult) -> str | None:
        facts = row.facts
        rate = facts.get("spec_acceptance_rate")
        if settings.backend != "sim":
            return None if rate is None else \
                f"speculation at a measured acceptance rate of {rate:.0%}"
        from sweetspot.backends.sim.speculative import DEFAULT_ACCEPTANCE

        method = (row.config.get("speculative") or {}).get("method")
        assumed = settings.acceptance if settings.acceptance is not None \
            else DEFAULT_ACCEPTANCE.get(method, 0.6)
        source = "--acceptance" if settings.acceptance is not None else (
            f"the simulator's default for {method}; measure yours and pass --acceptance")
        text = f"speculation assumes an acceptance of {assumed:.2f} per drafted token ({source})"
        return text + (f"; simulated acceptance rate {rate:.0%}" if rate is not None else "")

    return describe
