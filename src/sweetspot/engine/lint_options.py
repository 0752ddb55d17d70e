"""``lint``'s first pass: each option of a ``vllm serve`` command line against the release's flag
table, one at a time.

An option is unknown (a close spelling is suggested and checked in its place), removed (legacy
speculative flags are kept aside to be translated into ``--speculative-config``), not yet there
(checked under its older spelling when the release has one), or present, when its value is checked
for type and choices. What survives is kept, with its typed value under its knob's name, so the
later passes (vLLM's cross-setting checks, the memory arithmetic, the corrected command) work on a
``ServingConfig``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.engine import releases
from sweetspot.engine.cmdline import Option
from sweetspot.engine.flags import FlagInfo, FlagLookup, FlagStatus, FlagTable
from sweetspot.spec.hardware import GiB
from sweetspot.spec.knobs import KNOBS, SpeculativeConfig

__all__ = ["Finding", "LintState", "check_option", "translate_speculation"]

_FLAG_TO_KNOB = {k.flag: k.name for k in KNOBS.values()}
# Legacy speculative flags -> key of --speculative-config.
_LEGACY_SPEC_KEYS = {
    "--speculative-model": "model",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size",
    "--ngram-prompt-lookup-max": "prompt_lookup_max",
    "--ngram-prompt-lookup-min": "prompt_lookup_min",
}
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # "error", "warning" or "info"
    code: str  # unknown-flag, removed-flag, not-yet-flag, bad-value, invalid-config, memory, note
    flag: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "flag": self.flag,
                "message": self.message}


@dataclass
class LintState:
    """What the option pass collects (the later passes add their findings here too)."""

    findings: list[Finding] = field(default_factory=list)
    kept: list[tuple[Option, str | None]] = field(default_factory=list)  # (option, knob name)
    settings: dict[str, Any] = field(default_factory=dict)
    legacy_spec: dict[str, str] = field(default_factory=dict)
    add_async: bool = False
    auto_model_len: bool = False
    seen: set[str] = field(default_factory=set)

    def add(self, severity: str, code: str, flag: str | None, message: str) -> None:
        self.findings.append(Finding(severity, code, flag, message))


def _human_int(raw: str, allow_auto: bool) -> int | None:
    """vLLM's human_readable_int: 8k = 8000, 8K = 8192; "auto"/-1 where it fits to memory."""
    text = raw.strip()
    if allow_auto and text in ("auto", "-1"):
        return None
    match = _HUMAN_INT.match(text)
    if match:
        number, suffix = match.groups()
        base = 1000 if suffix.islower() else 1024
        return int(float(number) * base ** ("kmgt".index(suffix.lower()) + 1))
    return int(text)


def _parse_value(info, knob_name: str | None, value: str) -> Any:
    """Typed value of an option; ValueError when it is not of the option's kind."""
    if knob_name == "speculative":
        data = json.loads(value)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        return SpeculativeConfig.from_dict(data)
    if knob_name == "kv_offloading_bytes":
        return int(float(value) * GiB)
    kind = info.kind if info is not None else "str"
    if kind == "int":
        allow_auto = info.accepts_suffix and knob_name == "max_model_len"
        return _human_int(value, allow_auto) if info.accepts_suffix else int(value)
    if kind == "float":
        return float(value)
    if kind == "json":
        return json.loads(value)
    return value


def check_option(option: Option, table: FlagTable, version: Version, st: LintState) -> None:
    """Check one option for ``version``: record its findings in ``st`` and keep it unless it is
    dropped. A misspelt or renamed flag is checked again under the spelling it stands for."""
    spelling = option.spelling
    if re.fullmatch(r"-O\d", spelling):  # -O3 is -O with the level attached
        st.kept.append((option, None))
        return
    look = table.lookup(spelling, version)
    name = look.info.name if look.info else table.normalise(spelling)
    if look.status == FlagStatus.UNKNOWN:
        _check_unknown(option, table, version, st)
    elif look.status == FlagStatus.REMOVED:
        _check_removed(option, look, name, table, version, st)
    elif look.status == FlagStatus.NOT_YET:
        _check_not_yet(option, look, name, table, version, st)
    else:
        _check_present(option, look, name, table, st)


def _check_unknown(option: Option, table: FlagTable, version: Version, st: LintState) -> None:
    spelling = option.spelling
    guess = table.suggest(spelling, version)
    if guess:
        st.add("error", "unknown-flag", spelling,
               f"{spelling} is not a vLLM {version} flag; did you mean {guess}?")
        check_option(Option(guess, option.value), table, version, st)
    else:
        st.add("error", "unknown-flag", spelling,
               f"{spelling} is not a vLLM {version} flag (dropped)")


def _check_removed(option: Option, look: FlagLookup, name: str, table: FlagTable,
                   version: Version, st: LintState) -> None:
    spelling = option.spelling
    if name in _LEGACY_SPEC_KEYS and option.value is not None:
        # Kept aside: translate_speculation turns these into one --speculative-config.
        st.legacy_spec[_LEGACY_SPEC_KEYS[name]] = option.value
        st.add("error", "removed-flag", spelling,
               f"{spelling} was removed in vLLM {look.removed_in}: {look.legacy.reason}")
        return
    reason = look.legacy.reason if look.legacy else f"last seen in {look.last_seen}"
    st.add("error", "removed-flag", spelling,
           f"{spelling} was removed in vLLM {look.removed_in}: {reason} (dropped)")
    if name == "--num-scheduler-steps" and version < releases.ASYNC_SCHEDULING_DEFAULT_SINCE:
        async_info = table.info("--async-scheduling")
        st.add_async = async_info is not None and table.present(async_info, version)


def _check_not_yet(option: Option, look: FlagLookup, name: str, table: FlagTable,
                   version: Version, st: LintState) -> None:
    spelling = option.spelling
    if name != spelling and look.info is not None and (
            table.present(look.info, version) and not look.negated):
        st.add("error", "not-yet-flag", spelling,
               f"{spelling} is spelled {look.info.name} before vLLM {look.since}")
        check_option(Option(look.info.name, option.value), table, version, st)
        return
    st.add("error", "not-yet-flag", spelling,
           f"{spelling} needs vLLM {look.since} or newer, not {version} (dropped)")


def _check_present(option: Option, look: FlagLookup, name: str, table: FlagTable,
                   st: LintState) -> None:
    spelling = option.spelling
    info = look.info
    if table.normalise(spelling) != spelling and info is not None:
        st.add("info", "note", spelling, f"vLLM reads {spelling} as {info.name}")
    if name in st.seen:
        st.add("warning", "note", spelling, f"{name} is given twice; the last one wins")
    st.seen.add(name)
    knob_name = _FLAG_TO_KNOB.get(name)
    if info is not None and info.kind == "bool":
        _take_switch(option, info, look.negated, knob_name, st)
    else:
        _take_value(option, info, name, knob_name, st)


def _take_switch(option: Option, info: FlagInfo, negated: bool, knob_name: str | None,
                 st: LintState) -> None:
    """A boolean flag: bare, or with true/false where vLLM accepts an optional value."""
    spelling = option.spelling
    if option.value is not None and info.optional_value and option.value.lower() in (
            "true", "false"):
        if knob_name:
            st.settings[knob_name] = (option.value.lower() == "true") != negated
        st.kept.append((option, knob_name))
        return
    if option.value is not None:
        st.add("error", "bad-value", spelling,
               f"{spelling} is a switch and takes no value (got {option.value!r})")
        option = Option(spelling, None)
    if knob_name:
        st.settings[knob_name] = not negated
    st.kept.append((option, knob_name))


def _take_value(option: Option, info: FlagInfo | None, name: str, knob_name: str | None,
                st: LintState) -> None:
    """A flag with a value: it must be there, be one of the choices and parse as its kind."""
    spelling, value = option.spelling, option.value
    if value is None:
        st.add("error", "bad-value", spelling, f"{spelling} needs a value")
        return
    if info is not None and info.choices and value not in info.choices:
        if name == "--scheduling-policy" and value.lower() == "lof":
            st.add("error", "bad-value", spelling,
                   "--scheduling-policy lof does not exist and never did: vLLM has fcfs "
                   "(the default) and priority (each request carries an integer 'priority', "
                   "lower first). Dropped; use priority with per-request priorities to favour "
                   "latency-sensitive traffic")
        else:
            st.add("error", "bad-value", spelling,
                   f"{spelling} must be one of {', '.join(info.choices)}, not {value!r} "
                   "(dropped)")
        return
    try:
        parsed = _parse_value(info, knob_name, value)
    except (ValueError, json.JSONDecodeError, SweetspotError) as exc:
        kind = info.kind if info else "value"
        st.add("error", "bad-value", spelling,
               f"{spelling} expects {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not "
               f"{value!r} ({exc}) (dropped)")
        return
    if knob_name == "max_model_len" and parsed is None:
        st.auto_model_len = True  # "auto"/-1: vLLM fits it to the KV cache
    if knob_name:
        st.settings[knob_name] = parsed
    st.kept.append((option, knob_name))


def translate_speculation(st: LintState, version: Version) -> None:
    """Legacy speculative flags (kept aside by the option pass) as one ``--speculative-config``,
    unless the command already gives one."""
    legacy = st.legacy_spec
    if not legacy:
        return
    if "speculative" in st.settings:
        st.add("warning", "note", "--speculative-config",
               "legacy speculative flags ignored beside --speculative-config")
        return
    model = legacy.get("model")
    method = "ngram" if model in ("[ngram]", "ngram") else "draft_model"
    data: dict[str, Any] = {"method": method, "num_speculative_tokens": legacy.get(
        "num_speculative_tokens", "5" if method == "ngram" else "3")}
    if method == "draft_model" and model:
        data["model"] = model
    for key in ("draft_tensor_parallel_size", "prompt_lookup_max", "prompt_lookup_min"):
        if key in legacy:
            data[key] = legacy[key]
    try:
        spec = SpeculativeConfig.from_dict(data)
    except SweetspotError as exc:
        st.add("error", "bad-value", "--speculative-model", f"cannot translate: {exc}")
        return
    st.settings["speculative"] = spec
    st.add("info", "note", "--speculative-config",
           f"legacy speculative flags translated to --speculative-config '{spec.to_json()}'"
           + (f" (draft models need vLLM {releases.DRAFT_MODEL_SINCE}+ on V1)"
              if method == "draft_model" and version < releases.DRAFT_MODEL_SINCE else ""))
