"""An argv checked by argparse itself, against the installed server's parser rebuilt from its dump.

The dump (``installed.py``) keeps what argparse needs to accept or refuse a token: each option's
spellings, how many values it takes, its choices and the name of its value type. Rebuilt into an
``argparse.ArgumentParser``, it parses an argv as ``vllm serve`` would and refuses it in argparse's
own sentences. Only value types are approximated: ``int``, ``float`` and vLLM's human-readable
ints (``8k``) are checked as vLLM checks them, under the same names; any other type (JSON, a
dataclass, an optional wrapper) takes any string, since the dump holds only its name.

Before parsing, the argv gets the rewrites vLLM's ``FlexibleArgumentParser.parse_args`` makes:
underscores in an option's name are dashes, ``--opt.key value`` (one key of a JSON option) sets
``--opt``, and ``-O3`` is ``--optimization-level 3``. Abbreviations pass as they do in vLLM, whose
parser leaves ``allow_abbrev`` on.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NoReturn

__all__ = ["ParserOption", "ServeParser"]

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
# argparse's own test for a negative number, which is a value, never an option
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True, slots=True)
class ParserOption:
    """One option of the installed server's parser."""

    strings: tuple[str, ...]  # every spelling, "--max-num-seqs", "--no-enforce-eager", "-tp"
    nargs: int | str | None  # argparse's: None = one value, 0 = a switch, "?", "*", "+"
    choices: tuple[str, ...] | None
    type_name: str | None  # "int", "float", ... when argparse converts the value

    @property
    def is_switch(self) -> bool:
        return self.nargs == 0


class _Parser(argparse.ArgumentParser):
    """Raises where argparse would print and exit: even with ``exit_on_error=False`` a few
    refusals (an ambiguous abbreviation, among others) go to ``error``."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


class ServeParser:
    """The installed ``vllm serve`` options as an argparse parser (no program, no model)."""

    def __init__(self, options: Iterable[ParserOption]) -> None:
        self._parser = _Parser(prog="vllm serve", add_help=False, exit_on_error=False,
                               allow_abbrev=True)
        self._strings: set[str] = set()
        for n, option in enumerate(dict.fromkeys(options)):
            self._parser.add_argument(*option.strings, dest=f"option_{n}", **_how(option))
            self._strings.update(option.strings)

    def problems(self, args: Sequence[str]) -> list[str]:
        """Every refusal of ``args``, in argparse's words; empty when vLLM would take them.

        Argparse stops at its first refusal, where vLLM's server would too; the check goes on
        so that one edit fixes them all: it drops the option that was refused (with its values)
        and parses again, until argparse takes the rest, whose leftovers it names last as
        ``unrecognized arguments``."""
        rest = _flexible(args, self._strings)
        found: list[str] = []
        for _ in range(len(rest) + 1):  # each refusal drops at least one token
            try:
                _, unknown = self._parser.parse_known_args(rest, argparse.Namespace())
            except argparse.ArgumentError as exc:
                found.append(str(exc))
                remaining = self._without_refused(rest, str(exc))
                if remaining is None:
                    break  # not found on its own: the first refusal stands alone
                rest = remaining
                continue
            if unknown:
                found.append("unrecognized arguments: " + " ".join(unknown))
            break
        return found

    def _without_refused(self, args: list[str], refusal: str) -> list[str] | None:
        """``args`` less the option whose tokens alone draw ``refusal``. Argparse parses each
        option with the values that follow it on its own (these parsers have no positionals
        and nothing required), so the first option refused alone is the one refused."""
        for start, stop in _spans(args):
            try:
                self._parser.parse_known_args(args[start:stop], argparse.Namespace())
            except argparse.ArgumentError as exc:
                if str(exc) == refusal:
                    return args[:start] + args[stop:]
        return None


def human_readable_int(value: str) -> int:
    """vLLM's (``vllm.utils.argparse_utils``): 25.6k = 25,600, 1K = 1,024, and its sentence for
    a decimal with a binary suffix. The name is argparse's word for a value it refuses."""
    value = value.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    power = "kmgt".index(suffix.lower()) + 1
    if suffix.islower():
        return int(float(number) * 1000**power)
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. "
            f"Did you mean to use {number}{suffix.lower()} instead?")
    return int(number) * 1024**power


def human_readable_int_or_auto(value: str) -> int:
    """vLLM's: a human-readable int, or -1 / ``auto`` for "fit it to memory"."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


_TYPES = {"int": int, "float": float, "human_readable_int": human_readable_int,
          "human_readable_int_or_auto": human_readable_int_or_auto}


def _how(option: ParserOption) -> dict:
    """``add_argument``'s keywords for ``option``. A switch only needs to take no value: a
    ``--no-x`` form is one of its dumped spellings, so ``store_true`` over all of them accepts
    and refuses as vLLM's ``BooleanOptionalAction`` does, and is named alike in a refusal."""
    if option.is_switch:
        return {"action": "store_true"}
    kind = _TYPES.get(option.type_name or "")
    choices = option.choices
    if kind is not None and choices is not None:
        try:  # argparse compares a choice after conversion, as vLLM's typed choices are
            choices = tuple(kind(c) for c in choices)
        except (ValueError, argparse.ArgumentTypeError):
            kind = None
    return {"nargs": option.nargs, "type": kind, "choices": choices}


def _flexible(args: Sequence[str], strings: set[str]) -> list[str]:
    """``args`` as vLLM's ``FlexibleArgumentParser`` hands them to argparse: ``--max_num_seqs``
    is ``--max-num-seqs`` (up to any ``.``); ``--opt.key value`` or ``--opt.key=value`` sets
    ``--opt`` (vLLM folds such keys into one JSON value, taking the next token whatever it looks
    like); and where ``-O`` is no option of its own but ``--optimization-level`` is (as in 0.32),
    ``-O3``, ``-O=3`` and ``-O 3`` are that level. A dotted name whose option is unknown stays
    as typed, to be named so."""
    level_o = "-O" not in strings and "--optimization-level" in strings
    out: list[str] = []
    tokens = iter(enumerate(args))
    for i, token in tokens:
        name, eq, value = token.partition("=")
        if name.startswith("--"):
            head, dot, key = name.partition(".")
            name = head.replace("_", "-") + dot + key
        base = name.partition(".")[0]
        if name.startswith("-") and base != name and base in strings:
            following = value if eq else next(tokens, (0, None))[1]
            out.append(base if following is None else f"{base}={following}")
        elif level_o and token.startswith("-O") and token != "-O":
            out += ["--optimization-level", token[3:] if token[2] == "=" else token[2:]]
        elif level_o and token == "-O" and args[i + 1:i + 2] in (["0"], ["1"], ["2"], ["3"]):
            out.append("--optimization-level")
        else:
            out.append(name + eq + value)
    return out


def _spans(args: Sequence[str]) -> list[tuple[int, int]]:
    """Where each option's tokens start and stop, as argparse splits them: at every token that
    looks like an option, and nowhere after ``--``."""
    starts = []
    for i, token in enumerate(args):
        if token == "--":
            break
        name = token.partition("=")[0]
        if token.startswith("-") and token != "-" and not _NEGATIVE.match(token) \
                and " " not in name:
            starts.append(i)
    bounds = [*starts, len(args)]
    return list(pairwise(bounds))
