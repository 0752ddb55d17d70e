"""Speculative decoding in the simulator: who drafts, what it costs, how many tokens survive.

Each decode step of a speculating request verifies 1 + k tokens (the last sampled token and k
drafts) in the target model; the drafts are accepted left to right, each with probability
``acceptance`` given the previous one was, so the step emits 1 + (accepted prefix) tokens:
between 1 and k + 1. Drafters:

- ``ngram`` / ``ngram_gpu`` / ``suffix``: prompt lookup, no model; a small CPU cost per sequence.
- ``draft_model``: a smaller model from the catalog runs k passes per step (its own step time
  from the same cost model) and keeps its own weights and KV cache on the device.
- ``eagle`` / ``eagle3`` / ``mtp``: a one-layer head on the target's hidden states: k passes of
  one target-sized layer.

Default acceptance per method (per position, chat-like text): documented guesses from public
reports — EAGLE papers report 3-4 accepted of 5-6 drafted on chat (~0.75-0.8 per position),
draft models of the same family ~0.7, prompt lookup ~0.6 where outputs quote their prompt
(summarisation, code editing) and much less on free chat. Pass a measured rate when you have
one (``spec_decode_num_accepted_tokens / spec_decode_num_draft_tokens`` from /metrics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sweetspot._errors import SweetspotError
from sweetspot.spec.knobs import SpeculativeConfig
from sweetspot.spec.model import ModelArch, load_model

__all__ = ["DEFAULT_ACCEPTANCE", "Speculation", "plan_speculation"]

DEFAULT_ACCEPTANCE = {
    "ngram": 0.6,
    "ngram_gpu": 0.6,
    "suffix": 0.6,
    "draft_model": 0.7,
    "eagle": 0.75,
    "eagle3": 0.8,
    "mtp": 0.8,
    "medusa": 0.6,
    "mlp_speculator": 0.6,
}


@dataclass(frozen=True, slots=True)
class Speculation:
    k: int  # drafted tokens per step, 0 = no speculation
    acceptance: float
    draft: ModelArch | None = None  # runs k passes per step; weights + KV beside the target's
    cpu_drafting: bool = False

    def drawer(self, rng: np.random.Generator) -> Callable[[int], np.ndarray]:
        """A function: tokens still to emit -> tokens emitted per decode step until done."""
        k, a = self.k, min(self.acceptance, 0.999)

        def draw(remaining: int) -> np.ndarray:
            if a <= 0:
                return np.ones(remaining, dtype=np.int64)
            accepted = np.minimum(rng.geometric(1.0 - a, size=remaining) - 1, k)
            emit = 1 + accepted
            cum = np.cumsum(emit)
            last = int(np.searchsorted(cum, remaining))
            emit = emit[:last + 1].copy()
            emit[-1] -= int(cum[last]) - remaining
            return emit

        return draw


def plan_speculation(config: SpeculativeConfig | None, arch: ModelArch,
                     acceptance: float | None) -> Speculation | str:
    """The simulator's plan for ``config``, or why vLLM would refuse it."""
    if config is None:
        return Speculation(0, 0.0)
    method, k = config.method, config.num_speculative_tokens
    if k < 1:
        return "num_speculative_tokens must be at least 1"
    if acceptance is None:
        acceptance = DEFAULT_ACCEPTANCE.get(method, 0.6)
    if not 0.0 <= acceptance <= 1.0:
        raise SweetspotError(f"speculative acceptance must be between 0 and 1, not {acceptance}")
    if method in ("ngram", "ngram_gpu", "suffix"):
        return Speculation(k, acceptance, cpu_drafting=True)
    if method in ("eagle", "eagle3", "mtp", "medusa", "mlp_speculator"):
        head = dataclasses.replace(arch, num_layers=1, name=f"{arch.name}-{method}-head")
        return Speculation(k, acceptance, draft=head)
    if method == "draft_model":
        if not config.model:
            return "draft_model speculation needs a draft model"
        try:
            draft = load_model(config.model).arch
        except SweetspotError as exc:
            return f"draft model: {exc}"
        return Speculation(k, acceptance, draft=draft)
    return f"unknown speculative method {method!r}"
