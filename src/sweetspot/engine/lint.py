"""``sweetspot lint``: what is wrong with a ``vllm serve`` command line for one vLLM release and
GPU, and the command with every fixable problem fixed.

Order of the checks: each option against the release's flag table (unknown, removed, not yet
there, value type and choices: ``lint_options``); legacy spellings translated (speculative flags
into ``--speculative-config``); vLLM's own cross-setting checks (``validate``); and, when the GPU
and the model are known, the start-up memory arithmetic (``memory``). Errors are what vLLM would
refuse; warnings start but are probably not what the author meant; infos explain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.engine import releases
from sweetspot.engine.cmdline import Option, ServeCommand, parse_serve_command
from sweetspot.engine.flags import flag_table
from sweetspot.engine.lint_options import Finding, LintState, check_option, translate_speculation
from sweetspot.engine.memory import MemoryEstimate, estimate_memory
from sweetspot.engine.render import render_serve
from sweetspot.engine.validate import validate_config
from sweetspot.spec.hardware import GiB, Hardware
from sweetspot.spec.knobs import KNOBS, ServingConfig, SpeculativeConfig
from sweetspot.spec.model import ModelArch, load_model
from sweetspot.spec.quant import Quantization, load_quantization

__all__ = ["Finding", "LintReport", "lint_command"]

# Knobs whose vLLM default depends on the device.
_HARDWARE_DEFAULTS = {"max_num_seqs", "max_num_batched_tokens", "async_scheduling", "block_size"}


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


def _resolve(model: str | None, quant_flag: str | None, st: LintState
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


def _corrected_options(cmd: ServeCommand, st: LintState, original: ServingConfig,
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
              arch: ModelArch | None, st: LintState) -> ServingConfig:
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
                   arch: ModelArch | None, st: LintState) -> None:
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
    st = LintState()
    for word in cmd.extra_positionals:
        st.add("error", "bad-value", None, f"unexpected word {word!r}: vLLM takes one model")
    for option in cmd.options:
        check_option(option, table, version, st)
    translate_speculation(st, version)
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
