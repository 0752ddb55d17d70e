"""Writing a ``ServingConfig`` as ``vllm serve`` arguments or as a vLLM YAML config file
(``vllm serve --config FILE``) for one vLLM release.

A setting the release does not have is left out with a note saying why, never emitted as a flag
the server would reject.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import yaml
from packaging.version import Version

from sweetspot.engine.flags import FlagTable, flag_table
from sweetspot.engine.releases import (
    ASYNC_SCHEDULING_DEFAULT_SINCE,
    NUM_SCHEDULER_STEPS_REMOVED,
    SPECULATIVE_CONFIG_SINCE,
    YAML_FALSE_SINCE,
    YAML_NESTED_SINCE,
)
from sweetspot.spec.hardware import GiB
from sweetspot.spec.knobs import KNOBS, ServingConfig, SpeculativeConfig

__all__ = ["Rendered", "render_serve", "render_yaml"]



@dataclass(frozen=True, slots=True)
class Rendered:
    """A configuration as one release spells it."""

    model: str
    options: tuple[tuple[str, Any], ...]  # (flag, value); value True = bare switch
    notes: tuple[str, ...]  # settings left out or translated, and why

    def argv(self, program: tuple[str, ...] = ("vllm", "serve")) -> list[str]:
        out = [*program, self.model]
        for flag, value in self.options:
            out += [flag] if value is True else [flag, _text(value)]
        return out

    def command(self, program: tuple[str, ...] = ("vllm", "serve")) -> str:
        return shlex.join(self.argv(program))


def _text(value: Any) -> str:
    if isinstance(value, SpeculativeConfig):
        return value.to_json()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _bool_option(table: FlagTable, flag: str, value: bool, version: Version,
                 notes: list[str]) -> tuple[str, Any] | None:
    info = table.info(flag)
    if value:
        return flag, True
    if info is not None and info.negatable_in(table.sample_for(version)):
        return "--no-" + flag[2:], True
    notes.append(f"{flag} cannot be switched off by a flag in vLLM {version}; left at its default")
    return None


def render_serve(config: ServingConfig, model: str, version: Version) -> Rendered:
    """The options of ``config`` for vLLM ``version``, in ServingConfig field order."""
    table = flag_table()
    options: list[tuple[str, Any]] = []
    notes: list[str] = []
    for name, value in config.explicit().items():
        knob = KNOBS[name]
        if name == "num_scheduler_steps" and version >= NUM_SCHEDULER_STEPS_REMOVED:
            notes.append(
                f"--num-scheduler-steps {value} dropped: removed in vLLM 0.10.1; async "
                "scheduling now hides the scheduling overhead"
                + (" and is on by default" if version >= ASYNC_SCHEDULING_DEFAULT_SINCE
                   else "")
            )
            continue
        if name == "speculative" and version < SPECULATIVE_CONFIG_SINCE:
            options += _legacy_speculative(value, version, notes)
            continue
        info = table.info(knob.flag)
        if info is not None and not table.present(info, version):
            notes.append(
                f"{knob.flag} dropped: vLLM {version} does not have it "
                f"(first seen in {info.first_seen})"
            )
            continue
        if knob.kind == "bool":
            option = _bool_option(table, knob.flag, value, version, notes)
            if option is not None:
                options.append(option)
        elif name == "kv_offloading_bytes":
            options.append((knob.flag, round(value / GiB, 3)))
        else:
            options.append((knob.flag, value))
    return Rendered(model, tuple(options), tuple(notes))


def _legacy_speculative(spec: SpeculativeConfig, version: Version,
                        notes: list[str]) -> list[tuple[str, Any]]:
    """Speculation as releases before 0.8.3 spelled it: --speculative-model (a draft or EAGLE
    checkpoint, or ``[ngram]``), --num-speculative-tokens and the n-gram window."""
    if spec.method == "ngram":
        out: list[tuple[str, Any]] = [("--speculative-model", "[ngram]")]
    elif spec.model is not None and spec.method in ("draft_model", "eagle"):
        out = [("--speculative-model", spec.model)]
    else:
        notes.append(f"speculative method {spec.method} dropped: vLLM {version} has no "
                     "--speculative-config and no flag for it")
        return []
    out.append(("--num-speculative-tokens", spec.num_speculative_tokens))
    for flag, value in (("--ngram-prompt-lookup-max", spec.prompt_lookup_max),
                        ("--ngram-prompt-lookup-min", spec.prompt_lookup_min),
                        ("--speculative-draft-tensor-parallel-size",
                         spec.draft_tensor_parallel_size)):
        if value is not None:
            out.append((flag, value))
    return out


def render_yaml(config: ServingConfig, model: str, version: Version) -> str:
    """A vLLM YAML config (``vllm serve --config FILE``) equivalent to ``render_serve``."""
    rendered = render_serve(config, model, version)
    data: dict[str, Any] = {"model": model}
    for flag, value in rendered.options:
        key = flag[2:]
        if isinstance(value, SpeculativeConfig):
            data[key] = value.to_dict() if version >= YAML_NESTED_SINCE else value.to_json()
        elif value is True and key.startswith("no-") and version >= YAML_FALSE_SINCE:
            data[key[3:]] = False
        else:
            data[key] = value
    header = "".join(f"# {note}\n" for note in rendered.notes)
    return f"# vllm serve --config this-file.yaml  (vLLM {version})\n{header}" + yaml.safe_dump(
        data, sort_keys=False
    )
