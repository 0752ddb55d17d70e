"""The workload presets as plain data (``spec.workload`` validates them): importable without
numpy or pydantic, so that commands that only name them (the CLI's help) start fast."""

from __future__ import annotations

__all__ = ["PRESETS", "PRESET_DATA"]


def _lognormal(median: float, sigma: float, low: int, high: int) -> dict[str, str | float]:
    return {"kind": "lognormal", "median": median, "sigma": sigma, "min": low, "max": high}


PRESET_DATA: dict[str, dict[str, object]] = {
    "chat": {
        "description": "chat assistant: one fixed 512-token system prompt, short turns",
        "prompt": _lognormal(150, 0.8, 8, 4096),
        "output": _lognormal(200, 0.7, 16, 2048),
        "prefix": {"length": 512, "num_prefixes": 1, "share": 1.0},
        "arrival": {"process": "poisson", "rate": 10},
    },
    "short": {
        "description": "many short requests: prompts under 512 tokens",
        "prompt": {"kind": "uniform", "low": 32, "high": 480},
        "output": {"kind": "uniform", "low": 32, "high": 256},
        "arrival": {"process": "poisson", "rate": 20},
    },
    "long": {
        "description": "few long requests: prompts over 2K tokens",
        "prompt": _lognormal(4000, 0.4, 2048, 16000),
        "output": _lognormal(300, 0.6, 16, 1500),
        "arrival": {"process": "poisson", "rate": 2},
    },
    "rag": {
        "description": "retrieval-augmented: long retrieved context, short answers",
        "prompt": _lognormal(3000, 0.35, 1024, 8000),
        "output": _lognormal(150, 0.5, 16, 512),
        "prefix": {"length": 256, "num_prefixes": 1, "share": 1.0},
        "arrival": {"process": "poisson", "rate": 4},
    },
    "mixed-priority": {
        "description": "chat traffic with an interactive class ahead of a batch class",
        "prompt": _lognormal(200, 0.9, 8, 4096),
        "output": _lognormal(200, 0.7, 16, 2048),
        "prefix": {"length": 256, "num_prefixes": 4, "share": 0.8},
        "arrival": {"process": "poisson", "rate": 10},
        "priorities": [
            {"name": "interactive", "priority": 0, "share": 0.3},
            {"name": "batch", "priority": 10, "share": 0.7},
        ],
    },
}

PRESETS = tuple(PRESET_DATA)
