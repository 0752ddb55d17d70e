"""``sweetspot lint``: what is wrong with a ``vllm serve`` command line for one vLLM release and
GPU, and the command with every fixable problem fixed.

Order of the checks: each option against the release's flag table (unknown, removed, not yet
there, value type and choices); legacy spellings translated (speculative flags into
``--speculative-config``); vLLM's own cross-setting checks (``validate``); and, when the GPU and the
model are known, the start-up memory arithmetic (``memory``). Errors are what vLLM would refuse;
warnings start but are probably not what the author meant; infos explain.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.engine import releases
from sweetspot.engine.cmdline import Option, ServeCommand, parse_serve_command
from sweetspot.engine.flags import FlagStatus, FlagTable, flag_table
from sweetspot.engine.memory import MemoryEstimate, estimate_memory
from sweetspot.engine.render import render_serve
from sweetspot.engine.validate import validate_config
from sweetspot.spec.hardware import GiB, Hardware
from sweetspot.spec.knobs import KNOBS, ServingConfig, SpeculativeConfig
from sweetspot.spec.model import ModelArch, load_model
from sweetspot.spec.quant import Quantization, load_quantization

__all__ = ["Finding", "LintReport", "lint_command"]

_FLAG_TO_KNOB = {k.flag: k.name for k in KNOBS.values()}
# Legacy speculative flags -> key of --speculative-config.
_LEGACY_SPEC_KEYS = {
    "--speculative-model": "model",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size",
    "--ngram-prompt-lookup-max": "prompt_lookup_max",
    "--ngram-prompt-lookup-min": "prompt_lookup_min",
}
# Knobs whose vLLM default depends on the device.
_HARDWARE_DEFAULTS = {"max_num_seqs", "max_num_batched_tokens", "async_scheduling", "block_size"}
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


@dataclass(frozen=True, slots=True)
class LintReport:
    command: str
    version: Version
    gpu: str | None
    model: str | None
    findings: tuple[Finding, ...]
    corrected: str | None  # None when nothing needed fixing or nothing could be fixed
    memory: MemoryEstimate | None  # of the corrected configuration
    config: ServingConfig | None = None  # the settings the command gives, as parsed

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def to_dict(self) -> dict[str, Any]:
        memory = None
        if self.memory is not None:
            memory = {
                "kv_cache_tokens": self.memory.kv_cache_tokens,
                "max_concurrency": round(self.memory.max_concurrency, 2),
                "kv_cache_gib": round(self.memory.kv_cache_bytes / GiB, 2),
                "weights_gib": round(self.memory.weight_bytes / GiB, 2),
                "failure": self.memory.failure,
            }
        return {
            "command": self.command,
            "vllm_version": str(self.version),
            "gpu": self.gpu,
            "model": self.model,
            "ok": self.exit_code == 0,
            "findings": [f.to_dict() for f in self.findings],
            "corrected": self.corrected,
            "memory": memory,
        }


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


@dataclass
class _State:
    """What the option pass collects."""

    findings: list[Finding] = field(default_factory=list)
    kept: list[tuple[Option, str | None]] = field(default_factory=list)  # (option, knob name)
    settings: dict[str, Any] = field(default_factory=dict)
    legacy_spec: dict[str, str] = field(default_factory=dict)
    add_async: bool = False
    auto_model_len: bool = False
    seen: set[str] = field(default_factory=set)

    def add(self, severity: str, code: str, flag: str | None, message: str) -> None:
        self.findings.append(Finding(severity, code, flag, message))


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


def _check_option(option: Option, table: FlagTable, version: Version, st: _State) -> None:
    spelling = option.spelling
    if re.fullmatch(r"-O\d", spelling):  # -O3 is -O with the level attached
        st.kept.append((option, None))
        return
    look = table.lookup(spelling, version)
    name = look.info.name if look.info else table.normalise(spelling)
    if look.status == FlagStatus.UNKNOWN:
        guess = table.suggest(spelling, version)
        if guess:
            st.add("error", "unknown-flag", spelling,
                   f"{spelling} is not a vLLM {version} flag; did you mean {guess}?")
            _check_option(Option(guess, option.value), table, version, st)
        else:
            st.add("error", "unknown-flag", spelling,
                   f"{spelling} is not a vLLM {version} flag (dropped)")
        return
    if look.status == FlagStatus.REMOVED:
        if name in _LEGACY_SPEC_KEYS and option.value is not None:
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
        return
    if look.status == FlagStatus.NOT_YET and name != spelling and look.info is not None and (
            table.present(look.info, version) and not look.negated):
        st.add("error", "not-yet-flag", spelling,
               f"{spelling} is spelled {look.info.name} before vLLM {look.since}")
        _check_option(Option(look.info.name, option.value), table, version, st)
        return
    if look.status == FlagStatus.NOT_YET:
        st.add("error", "not-yet-flag", spelling,
               f"{spelling} needs vLLM {look.since} or newer, not {version} (dropped)")
        return
    info = look.info
    if table.normalise(spelling) != spelling and info is not None:
        st.add("info", "note", spelling, f"vLLM reads {spelling} as {info.name}")
    if name in st.seen:
        st.add("warning", "note", spelling, f"{name} is given twice; the last one wins")
    st.seen.add(name)
    knob_name = _FLAG_TO_KNOB.get(name)
    if info is not None and info.kind == "bool":
        if option.value is not None and info.optional_value and option.value.lower() in (
                "true", "false"):
            if knob_name:
                st.settings[knob_name] = (option.value.lower() == "true") != look.negated
            st.kept.append((option, knob_name))
            return
        if option.value is not None:
            st.add("error", "bad-value", spelling,
                   f"{spelling} is a switch and takes no value (got {option.value!r})")
            option = Option(spelling, None)
        if knob_name:
            st.settings[knob_name] = not look.negated
        st.kept.append((option, knob_name))
        return
    value = option.value
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


def _translate_speculation(st: _State, version: Version) -> None:
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


def _resolve(model: str | None, quant_flag: str | None, st: _State
             ) -> tuple[ModelArch | None, Quantization | None]:
    if model is None:
        st.add("info", "note", None, "no model given: vLLM serves its default model")
        return None, None
    try:
        resolved = load_model(model)
    except SweetspotError as exc:
        st.add("info", "note", None, f"memory checks skipped: {exc}")
        return None, None
    quant = resolved.quantization
    if quant_flag:
        try:
            quant = load_quantization(quant_flag)
        except SweetspotError:
            st.add("info", "note", "--quantization",
                   f"memory checks assume bf16 weights: {quant_flag!r} is not modelled")
    return resolved.arch, quant or resolved.arch.default_quantization()


def _draft(config: ServingConfig) -> ModelArch | None:
    spec = config.speculative
    if spec is None or spec.method != "draft_model" or not spec.model:
        return None
    try:
        return load_model(spec.model).arch
    except SweetspotError:
        return None


def _memory_fix(est: MemoryEstimate, config: ServingConfig) -> dict[str, Any] | None:
    """A change that lets a config that fails for memory start, when one is obvious."""
    failure = est.failure or ""
    if failure.startswith("Free memory on device"):
        return {"gpu_memory_utilization": 0.95}
    if failure.startswith("To serve at least one request"):
        longest = est.num_blocks * est.block_size
        return {"max_model_len": longest // 1024 * 1024 or longest} if longest else None
    if "CUDA graph capture" in failure:
        util = (config.gpu_memory_utilization or 0.9) - 0.01
        return {"gpu_memory_utilization": round(util, 2)} if util > 0.5 else None
    return None


def _check_memory(config, arch, quant, hardware, version, st) -> tuple[ServingConfig,
                                                                         MemoryEstimate, bool]:
    """Estimate memory; on a refusal, try the obvious fix up to a few times."""
    est = estimate_memory(arch, quant, hardware, config, version, draft=_draft(config))
    if st.auto_model_len and (est.failure or "").startswith("To serve at least one request"):
        fitted = est.num_blocks * est.block_size
        st.add("info", "note", "--max-model-len",
               f"auto: vLLM will fit max-model-len to the KV cache, about {fitted:,} tokens")
        est = estimate_memory(arch, quant, hardware, config.replace(max_model_len=fitted),
                              version, draft=_draft(config))
    if est.ok:
        return config, est, True
    st.add("error", "memory", None,
           f"cannot start on {hardware.display_name}: {est.failure}")
    for _ in range(5):
        fix = _memory_fix(est, config)
        if fix is None:
            st.add("info", "note", None,
                   "no automatic fix: use more GPUs (--tensor-parallel-size), a quantised "
                   "checkpoint or a GPU with more memory")
            return config, est, False
        config = config.replace(**fix)
        est = estimate_memory(arch, quant, hardware, config, version, draft=_draft(config))
        if est.ok:
            return config, est, True
    return config, est, False


def _corrected_options(cmd: ServeCommand, st: _State, original: ServingConfig,
                       config: ServingConfig, version: Version) -> list[Option]:
    rendered = {flag: value for flag, value in
                render_serve(config, cmd.model or "", version).options}
    by_knob = {KNOBS[name].flag: name for name in config.explicit()}
    out: list[Option] = []
    emitted: set[str] = set()
    for option, knob_name in st.kept:
        if knob_name is None:
            out.append(option)
            continue
        if knob_name in emitted:
            continue
        emitted.add(knob_name)
        new, old = getattr(config, knob_name), getattr(original, knob_name)
        if new is None:
            continue
        if new == old:
            out.append(option)
            continue
        flag = KNOBS[knob_name].flag
        value = rendered.get(flag, rendered.get("--no-" + flag[2:]))
        out.append(Option(flag, None if value is True else _fmt(value)))
    for flag, value in rendered.items():
        name = by_knob.get(flag) or by_knob.get("--" + flag[5:] if flag.startswith("--no-")
                                                else flag)
        if name and name not in emitted:
            out.append(Option(flag, None if value is True else _fmt(value)))
    if st.add_async and not validate_config(config.replace(async_scheduling=True), version):
        out.append(Option("--async-scheduling", None))
    return out


def _validate(config: ServingConfig, version: Version, hardware: Hardware | None,
              arch: ModelArch | None, st: _State) -> ServingConfig:
    """Report vLLM's cross-setting problems and apply their fixes; a fix can uncover another
    problem (an ngram fallback for a draft model), so repeat until nothing changes."""
    reported: set[str] = set()
    for _ in range(3):
        problems = validate_config(config, version, hardware, arch)
        for problem in problems:
            if problem.message not in reported:
                reported.add(problem.message)
                code = "invalid-config" if problem.severity == "error" else "note"
                st.add(problem.severity, code, problem.flag, problem.message)
        fixes = [p.fix for p in problems if p.severity == "error"]
        if not fixes:
            break
        for fix in fixes:
            config = config.replace(**fix)
    return config


def _note_defaults(config: ServingConfig, version: Version, hardware: Hardware | None,
                   arch: ModelArch | None, st: _State) -> None:
    """Say which explicit settings only repeat vLLM's default (they can be omitted, and they
    stop following vLLM when its defaults improve)."""
    if hardware is None:
        return
    model_len = arch.max_position_embeddings if arch else None
    for name, value in config.explicit().items():
        if name in ("max_model_len", "speculative", "quantization"):
            continue
        if value == releases.vllm_default(name, version, hardware, config.replace(**{name: None}),
                                 model_len):
            flag = KNOBS[name].flag
            shown = flag if isinstance(value, bool) else f"{flag} {_fmt(value)}"
            where = f" on {hardware.name}" if name in _HARDWARE_DEFAULTS else ""
            st.add("info", "note", flag,
                   f"{shown} is vLLM {version}'s default{where}; it can be omitted")


def _fmt(value: Any) -> str:
    if isinstance(value, SpeculativeConfig):
        return value.to_json()
    return f"{value:g}" if isinstance(value, float) else str(value)


def lint_command(text: str, version: Version, hardware: Hardware | None = None) -> LintReport:
    """Lint ``text`` for vLLM ``version`` and, when given, ``hardware``."""
    table = flag_table()
    cmd = parse_serve_command(text, table)
    st = _State()
    for word in cmd.extra_positionals:
        st.add("error", "bad-value", None, f"unexpected word {word!r}: vLLM takes one model")
    for option in cmd.options:
        _check_option(option, table, version, st)
    _translate_speculation(st, version)
    original = ServingConfig(**st.settings)
    arch, quant = _resolve(cmd.model, original.quantization, st)

    config = _validate(original, version, hardware, arch, st)
    _note_defaults(original, version, hardware, arch, st)

    estimate, fixable = None, True
    if hardware is not None and arch is not None:
        config, estimate, fixable = _check_memory(config, arch, quant, hardware, version, st)
        if estimate.ok:
            st.add("info", "note", None,
                   f"KV cache {estimate.kv_cache_tokens:,} tokens "
                   f"({estimate.kv_cache_bytes / GiB:.1f} GiB), max concurrency "
                   f"{estimate.max_concurrency:.2f}x at max-model-len {estimate.max_model_len:,} "
                   f"on {hardware.display_name}")
    if version >= releases.ASYNC_SCHEDULING_DEFAULT_SINCE and any(
        f.flag == "--num-scheduler-steps" for f in st.findings
    ) and not (hardware and hardware.is_cpu):
        st.add("info", "note", "--async-scheduling",
               f"async scheduling is on by default in vLLM {version} on GPUs"
               + (" but off with draft-model/ngram speculation"
                  if config.speculative and config.speculative.method not in
                  ("eagle", "eagle3", "mtp") else ""))
    has_errors = any(f.severity == "error" for f in st.findings)
    corrected = None
    if has_errors and fixable:
        corrected = cmd.text(_corrected_options(cmd, st, original, config, version))
    return LintReport(
        command=text,
        version=version,
        gpu=hardware.name if hardware else None,
        model=cmd.model,
        findings=tuple(st.findings),
        corrected=corrected,
        memory=estimate,
        config=original,
    )
