"""Which ``vllm serve`` options exist in which vLLM release.

The table ``data/vllm_flags.json`` was read from the published wheels (one per minor release,
0.6 to 0.34, and 0.6's post releases) by ``tools/extract_vllm_flags.py``. A release between two
sampled ones is judged by the nearest sampled release at or below it; the few flags whose exact
removal release matters carry it in ``LEGACY_FLAGS`` (from vllm-facts.md). The installed vLLM's
own ``--help`` stays the final word; the real-server backend checks it before launching.
"""

from __future__ import annotations

import bisect
import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from packaging.version import Version

__all__ = ["LEGACY_FLAGS", "FlagInfo", "FlagStatus", "FlagTable", "LegacyFlag", "flag_table"]


@dataclass(frozen=True, slots=True)
class FlagInfo:
    """One option of ``vllm serve`` across releases."""

    name: str  # canonical long spelling, "--max-num-seqs"
    aliases: tuple[str, ...]
    spans: tuple[tuple[Version, Version], ...]  # inclusive runs of sampled releases
    kind: str  # "bool", "int", "float", "str", "json", "list" or "unknown"
    negatable: bool  # "--no-<name>" accepted (from negatable_from to negatable_until)
    negatable_from: Version | None
    negatable_until: Version | None  # last sampled release with "--no-<name>"
    choices: tuple[str, ...] | None
    accepts_suffix: bool  # "8k"-style human-readable integers
    optional_value: bool = False  # a switch that also takes an explicit true/false
    aliases_from: tuple[tuple[str, Version], ...] = ()  # aliases younger than the flag

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"

    @property
    def first_seen(self) -> Version:
        return self.spans[0][0]

    def alias_since(self, spelling: str) -> Version | None:
        return dict(self.aliases_from).get(spelling)

    def negatable_in(self, sample: Version) -> bool:
        return self.negatable and not (
            (self.negatable_from and sample < self.negatable_from)
            or (self.negatable_until and sample > self.negatable_until)
        )


@dataclass(frozen=True, slots=True)
class LegacyFlag:
    """A flag that left vLLM, with what replaces it."""

    name: str
    removed_in: Version
    takes_value: bool
    reason: str


LEGACY_FLAGS: dict[str, LegacyFlag] = {
    f.name: f
    for f in (
        LegacyFlag(
            "--num-scheduler-steps", Version("0.10.1"), True,
            "multi-step scheduling was a V0 feature (V0 is gone since 0.11); async scheduling "
            "now hides the CPU's scheduling overhead behind the GPU step",
        ),
        LegacyFlag(
            "--speculative-model", Version("0.8.3"), True,
            "speculative decoding is configured with one JSON object, --speculative-config",
        ),
        LegacyFlag(
            "--num-speculative-tokens", Version("0.8.3"), True,
            "it is the num_speculative_tokens key of --speculative-config",
        ),
        LegacyFlag(
            "--speculative-draft-tensor-parallel-size", Version("0.8.3"), True,
            "it is the draft_tensor_parallel_size key of --speculative-config",
        ),
        LegacyFlag(
            "--ngram-prompt-lookup-max", Version("0.8.3"), True,
            "it is the prompt_lookup_max key of --speculative-config",
        ),
        LegacyFlag(
            "--ngram-prompt-lookup-min", Version("0.8.3"), True,
            "it is the prompt_lookup_min key of --speculative-config",
        ),
        LegacyFlag(
            "--swap-space", Version("0.18.0"), True,
            "V1 preempts by recomputation, not by swapping to host memory; a host KV tier is "
            "--kv-offloading-size (GiB) since 0.12",
        ),
        LegacyFlag(
            "--max-num-partial-prefills", Version("0.27.0"), True,
            "concurrent partial prefills are no longer configurable",
        ),
        LegacyFlag(
            "--use-v2-block-manager", Version("0.7.0"), False,
            "the v2 block manager became the only one; V1 has its own KV cache manager",
        ),
    )
}


class FlagStatus:
    """What a spelling means for one release."""

    PRESENT = "present"
    REMOVED = "removed"  # existed in an earlier release
    NOT_YET = "not-yet"  # exists only in later releases
    UNKNOWN = "unknown"  # never a vLLM flag


@dataclass(frozen=True, slots=True)
class FlagLookup:
    status: str
    info: FlagInfo | None  # None for UNKNOWN and for legacy flags outside the table
    negated: bool = False  # spelled "--no-<name>"
    legacy: LegacyFlag | None = None
    removed_in: Version | None = None  # first sampled release without it (REMOVED)
    last_seen: Version | None = None  # last sampled release with it (REMOVED)
    since: Version | None = None  # first sampled release with this spelling (NOT_YET)


class FlagTable:
    """The flags of every sampled release, with look-ups by any spelling."""

    def __init__(self, sampled: list[Version], flags: dict[str, FlagInfo]):
        self.sampled = sampled
        self.flags = flags
        self._by_spelling: dict[str, FlagInfo] = {}
        for info in flags.values():
            for spelling in (info.name, *info.aliases):
                self._by_spelling.setdefault(spelling, info)

    def sample_for(self, version: Version) -> Version:
        """The sampled release whose flags stand for ``version``."""
        index = bisect.bisect_right(self.sampled, version) - 1
        return self.sampled[max(index, 0)]

    @staticmethod
    def normalise(spelling: str) -> str:
        """vLLM's parser accepts underscores in option names; compare in the dashed form."""
        if spelling.startswith("--"):
            return "--" + spelling[2:].replace("_", "-")
        return spelling

    def info(self, spelling: str) -> FlagInfo | None:
        return self._by_spelling.get(self.normalise(spelling))

    def present(self, info: FlagInfo, version: Version) -> bool:
        sample = self.sample_for(version)
        return any(lo <= sample <= hi for lo, hi in info.spans)

    def lookup(self, spelling: str, version: Version) -> FlagLookup:
        name = self.normalise(spelling)
        legacy = LEGACY_FLAGS.get(name)
        if legacy is not None and version >= legacy.removed_in:
            return FlagLookup(FlagStatus.REMOVED, self.info(name), legacy=legacy,
                              removed_in=legacy.removed_in)
        negated = False
        info = self.info(name)
        if info is None and name.startswith("--no-"):
            base = self.info("--" + name[5:])
            if base is not None and base.negatable:
                info, negated = base, True
        if info is None:
            if legacy is not None:  # older than the table, still present
                return FlagLookup(FlagStatus.PRESENT, None, legacy=legacy)
            return FlagLookup(FlagStatus.UNKNOWN, None)
        sample = self.sample_for(version)
        alias_since = info.alias_since(name)
        if alias_since is not None and sample < alias_since:
            return FlagLookup(FlagStatus.NOT_YET, info, since=alias_since)
        if negated and not info.negatable_in(sample) and self.present(info, version):
            if info.negatable_from and sample < info.negatable_from:
                return FlagLookup(FlagStatus.NOT_YET, info, negated=True,
                                  since=info.negatable_from)
            return FlagLookup(FlagStatus.REMOVED, info, negated=True,
                              removed_in=self._after(info.negatable_until),
                              last_seen=info.negatable_until)
        if self.present(info, version):
            return FlagLookup(FlagStatus.PRESENT, info, negated=negated, legacy=legacy)
        if sample < info.first_seen:
            return FlagLookup(FlagStatus.NOT_YET, info, negated=negated, since=info.first_seen)
        last = max(hi for _, hi in info.spans if hi <= sample)
        return FlagLookup(FlagStatus.REMOVED, info, negated=negated,
                          removed_in=self._after(last), last_seen=last)

    def _after(self, sample: Version | None) -> Version | None:
        """The sampled release after ``sample``: the first one known to lack something."""
        if sample is None or sample not in self.sampled:
            return None
        index = self.sampled.index(sample) + 1
        return self.sampled[index] if index < len(self.sampled) else None

    def names_in(self, version: Version) -> list[str]:
        return sorted(name for name, info in self.flags.items() if self.present(info, version))

    def suggest(self, spelling: str, version: Version) -> str | None:
        """The closest flag of ``version`` to a misspelling, if any is close."""
        matches = difflib.get_close_matches(
            self.normalise(spelling), self.names_in(version), n=1, cutoff=0.75
        )
        return matches[0] if matches else None


def _info(name: str, entry: dict) -> FlagInfo:
    def version(key: str) -> Version | None:
        return Version(entry[key]) if entry.get(key) else None

    return FlagInfo(
        name=name,
        aliases=tuple(entry.get("aliases", ())),
        spans=tuple((Version(lo), Version(hi)) for lo, hi in entry["spans"]),
        kind=entry.get("kind", "unknown"),
        negatable=bool(entry.get("negatable", False)),
        negatable_from=version("negatable_from"),
        negatable_until=version("negatable_until"),
        choices=tuple(entry["choices"]) if entry.get("choices") else None,
        accepts_suffix=bool(entry.get("accepts_suffix", False)),
        optional_value=bool(entry.get("optional_value", False)),
        aliases_from=tuple((alias, Version(v)) for alias, v in
                           entry.get("aliases_from", {}).items()),
    )


@cache
def flag_table() -> FlagTable:
    text = resources.files("sweetspot.engine").joinpath("data/vllm_flags.json").read_text()
    data = json.loads(text)
    sampled = sorted(Version(v) for v in data["sampled_versions"])
    flags = {name: _info(name, entry) for name, entry in data["flags"].items()}
    return FlagTable(sampled, flags)
