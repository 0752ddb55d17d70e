"""One run's requests as arrays, for the paired bootstrap within a run: request i of A and request
i of B are the same request (one seed draws both sides' workload), so they are resampled together.

Built from a run's records (``from_records``, ordered by request id) or from a saved result's
per-request arrays (``from_json``): sweetspot's ``bench --json --detailed`` and vLLM's own
``vllm bench serve --save-result --save-detailed`` write ``ttfts``, ``itls`` (seconds),
``input_lens``, ``output_lens`` and ``errors`` (an empty string where the request succeeded);
sweetspot also writes ``e2els``, which vLLM's file lacks (then TTFT plus the gaps stands in: the
last chunk, which is where a stream ends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweetspot._errors import SweetspotError
from sweetspot.backends.records import RequestRecord

__all__ = ["PerRequest", "detailed_arrays"]


@dataclass(frozen=True, slots=True)
class PerRequest:
    """Seconds; NaN where a request failed (or, for TPOT, produced one token)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2el_s: np.ndarray
    itl_s: np.ndarray  # every gap of every successful request, pooled
    itl_owner: np.ndarray  # the request (index) each gap belongs to
    failed: np.ndarray  # bool per request

    def __len__(self) -> int:
        return len(self.failed)

    def values(self, name: str, idx: np.ndarray) -> np.ndarray:
        """The values of latency ``name`` (ttft, tpot, itl, e2el) for the requests ``idx``
        (with repeats, as a resample draws them); ITL gaps come once per draw of their
        request."""
        if name == "itl":
            counts = np.bincount(idx, minlength=len(self))
            return np.repeat(self.itl_s, counts[self.itl_owner])
        values: np.ndarray = getattr(self, f"{name}_s")[idx]
        return values

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> PerRequest:
        ordered = sorted(records, key=lambda r: r.request_id)
        ok = [r.ok and bool(r.chunk_times_s) for r in ordered]
        gaps = [r.itls_s if good else () for r, good in zip(ordered, ok, strict=True)]
        return cls(
            ttft_s=_floats(r.ttft_s if good else None for r, good in zip(ordered, ok,
                                                                          strict=True)),
            tpot_s=_floats(r.tpot_s if good else None for r, good in zip(ordered, ok,
                                                                          strict=True)),
            e2el_s=_floats(r.e2el_s if good else None for r, good in zip(ordered, ok,
                                                                          strict=True)),
            itl_s=np.fromiter((g for row in gaps for g in row), float),
            itl_owner=np.repeat(np.arange(len(gaps)), [len(row) for row in gaps]),
            failed=~np.asarray(ok, bool))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> PerRequest | None:
        """A result file's per-request arrays; None where it has none."""
        if "ttfts" not in data:
            return None
        try:
            ttfts = [float(x) for x in data["ttfts"]]
            itls = [[float(g) for g in row] for row in data["itls"]]
            outputs = [int(x) for x in data["output_lens"]]
            errors = [str(e or "") for e in data.get("errors") or [""] * len(ttfts)]
            e2els = ([float(x) for x in data["e2els"]] if "e2els" in data
                     else [t + sum(row) for t, row in zip(ttfts, itls, strict=True)])
            if not len(ttfts) == len(itls) == len(outputs) == len(errors) == len(e2els):
                raise ValueError("per-request arrays of different lengths")
        except (KeyError, TypeError, ValueError) as exc:
            raise SweetspotError(f"{source}: malformed per-request data ({exc})") from None
        failed = np.asarray([bool(e) for e in errors])
        tpot = [(e - t) / (n - 1) if n > 1 else None
                for t, e, n in zip(ttfts, e2els, outputs, strict=True)]
        gaps = [row if not bad else [] for row, bad in zip(itls, failed, strict=True)]
        return cls(
            ttft_s=np.where(failed, np.nan, ttfts), tpot_s=np.where(failed, np.nan,
                                                                    _floats(tpot)),
            e2el_s=np.where(failed, np.nan, e2els),
            itl_s=np.fromiter((g for row in gaps for g in row), float),
            itl_owner=np.repeat(np.arange(len(gaps)), [len(row) for row in gaps]),
            failed=failed)


def _floats(values) -> np.ndarray:
    return np.asarray([np.nan if v is None else float(v) for v in values], float)


def detailed_arrays(records: Sequence[RequestRecord]) -> dict[str, list]:
    """A run's per-request arrays in vLLM's ``--save-detailed`` keys (seconds, request order),
    plus ``e2els``: what ``from_json`` reads back."""
    ordered = sorted(records, key=lambda r: r.request_id)
    return {
        "input_lens": [r.prompt_tokens for r in ordered],
        "output_lens": [r.output_tokens if r.ok else 0 for r in ordered],
        "ttfts": [(r.ttft_s or 0.0) if r.ok else 0.0 for r in ordered],
        "itls": [list(r.itls_s) if r.ok else [] for r in ordered],
        "e2els": [(r.e2el_s or 0.0) if r.ok else 0.0 for r in ordered],
        "errors": ["" if r.ok else (r.error or "failed") for r in ordered],
    }
