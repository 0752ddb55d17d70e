"""Reading a ``vllm serve`` command line into its parts, and writing one back.

Accepted shapes: ``vllm serve MODEL [options]``, ``python -m vllm.entrypoints.openai.api_server
--model MODEL [options]``, ``python -m vllm.entrypoints.cli.main serve MODEL [options]``, each
optionally after ``VAR=value`` environment assignments, or bare options.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from sweetspot._errors import SweetspotError
from sweetspot.engine.flags import LEGACY_FLAGS, FlagTable

__all__ = ["Option", "ServeCommand", "parse_serve_command"]

_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_NUMBER = re.compile(r"^-\d")


@dataclass(frozen=True, slots=True)
class Option:
    """One option as written: ``--flag``, ``--flag value`` or ``--flag=value``."""

    spelling: str  # as written, without "=value"
    value: str | None  # None for a switch

    def tokens(self) -> list[str]:
        return [self.spelling] if self.value is None else [self.spelling, self.value]


@dataclass(frozen=True, slots=True)
class ServeCommand:
    env: tuple[str, ...]  # leading VAR=value assignments
    program: tuple[str, ...]  # e.g. ("vllm", "serve")
    model: str | None  # positional model, or --model's value
    model_as_option: bool  # the model came as --model
    options: tuple[Option, ...]
    extra_positionals: tuple[str, ...]  # positional words vLLM would reject

    def argv(self, options: list[Option] | tuple[Option, ...] | None = None) -> list[str]:
        """The command's words; with ``options``, those replace the options and stray
        positional words are left out (a corrected command)."""
        opts = self.options if options is None else options
        out = [*self.env, *self.program]
        if self.model is not None:
            out += ["--model", self.model] if self.model_as_option else [self.model]
        for option in opts:
            out += option.tokens()
        return out + list(self.extra_positionals if options is None else ())

    def text(self, options: list[Option] | tuple[Option, ...] | None = None) -> str:
        return shlex.join(self.argv(options))


def _split_program(words: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """Separate the program part (``vllm serve``, ``python -m ...``) from the arguments."""
    if not words or words[0].startswith("-"):
        return (), words
    if words[0].endswith("vllm"):
        if len(words) > 1 and words[1] == "serve":
            return tuple(words[:2]), words[2:]
        raise SweetspotError("only 'vllm serve' command lines can be linted")
    if re.match(r"^(.*/)?python[0-9.]*$", words[0]) and len(words) > 2 and words[1] == "-m":
        module = words[2]
        if module == "vllm.entrypoints.openai.api_server":
            return tuple(words[:3]), words[3:]
        if module == "vllm.entrypoints.cli.main" and len(words) > 3 and words[3] == "serve":
            return tuple(words[:4]), words[4:]
    raise SweetspotError(
        f"not a vllm serve command line: it starts with {words[0]!r} "
        "(expected 'vllm serve MODEL ...' or 'python -m vllm.entrypoints.openai.api_server ...')"
    )


def parse_serve_command(text: str, table: FlagTable) -> ServeCommand:
    """Split ``text`` into program, model and options. Whether an option takes a value is decided
    by the flag table (any release that had the flag), and for unknown options by the next word
    not starting with ``-``."""
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise SweetspotError(f"cannot split the command line: {exc}") from None
    if not words:
        raise SweetspotError("empty command line")
    env: list[str] = []
    while words and _ENV.match(words[0]):
        env.append(words.pop(0))
    program, rest = _split_program(words)

    model: str | None = None
    model_as_option = False
    options: list[Option] = []
    positionals: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if not word.startswith("-") or _NUMBER.match(word):
            if model is None:
                model = word
            else:
                positionals.append(word)
            i += 1
            continue
        spelling, has_eq, inline = word.partition("=")
        if has_eq:
            value: str | None = inline
            i += 1
        else:
            takes_value = _takes_value(spelling, table)
            nxt = rest[i + 1] if i + 1 < len(rest) else None
            follows = nxt is not None and (not nxt.startswith("-") or bool(_NUMBER.match(nxt)))
            if takes_value is None:
                takes_value = follows
            elif not takes_value and nxt is not None and nxt.lower() in ("true", "false"):
                info = table.info(spelling)
                takes_value = bool(info and info.optional_value)
            if takes_value and nxt is None:
                raise SweetspotError(f"{spelling} needs a value")
            value = nxt if takes_value else None
            i += 2 if takes_value else 1
        if table.normalise(spelling) == "--model" and value is not None:
            model, model_as_option = value, True
            continue
        options.append(Option(spelling, value))
    return ServeCommand(tuple(env), program, model, model_as_option, tuple(options),
                        tuple(positionals))


def _takes_value(spelling: str, table: FlagTable) -> bool | None:
    name = table.normalise(spelling)
    if name in LEGACY_FLAGS:
        return LEGACY_FLAGS[name].takes_value
    info = table.info(name)
    if info is None and name.startswith("--no-"):
        return False
    if info is None or info.kind == "unknown":
        return None
    return info.takes_value
