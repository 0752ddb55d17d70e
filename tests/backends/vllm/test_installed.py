"""Checking server options against the installed vLLM's parser, in argparse's words."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.installed import InstalledVllm, ParserOption, detect_vllm


def _installed() -> InstalledVllm:
    options = [
        ParserOption(("--max-num-seqs",), None, None, "int"),
        ParserOption(("--gpu-memory-utilization",), None, None, "float"),
        ParserOption(("--scheduling-policy",), None, ("fcfs", "priority"), None),
        ParserOption(("--enforce-eager",), 0, None, None),
        ParserOption(("--enable-prefix-caching", "--no-enable-prefix-caching"), 0, None, None),
        ParserOption(("--tensor-parallel-size", "-tp"), None, None, "int"),
        ParserOption(("--compilation-config", "-cc"), None, None, None),
        ParserOption(("--middleware",), "*", None, None),
        ParserOption(("--seed",), None, None, "int"),
        ParserOption(("--max-num-batched-tokens",), None, None, "human_readable_int"),
        ParserOption(("--max-model-len",), None, None, "human_readable_int_or_auto"),
        ParserOption(("--served-model-name",), "+", None, None),
        ParserOption(("--optimization-level",), None, None, "str"),
    ]
    table = {s: o for o in options for s in o.strings}
    return InstalledVllm("python", Version("0.32.0"), table)


@pytest.mark.parametrize("args", [
    [],
    ["--max-num-seqs", "32", "--enforce-eager"],
    ["--max_num_seqs", "32"],  # FlexibleArgumentParser: underscores are dashes
    ["--max-num-seqs=32", "--scheduling-policy=priority"],
    ["-tp", "2", "--no-enable-prefix-caching"],
    ["--compilation-config.level", "3"],  # one key of a JSON option
    ["--middleware", "a", "b", "--seed", "-1"],  # a negative number is a value
    ["--max-num-batched-tokens", "8k", "--max-model-len", "auto"],  # vLLM's human-readable ints
    ["--max-model-len=1K", "--served-model-name", "a", "b"],
    ["-O3"], ["-O", "2"], ["-O=1"],  # FlexibleArgumentParser: --optimization-level
    ["--scheduling", "fcfs", "--gpu=0.5"],  # abbreviations, as vLLM's parser allows them
    ["--compilation_config.cudagraph_mode", "-1"],  # a dotted key takes the next token
])
def test_accepted(args: list[str]) -> None:
    assert _installed().check_argv(args) == []


@pytest.mark.parametrize(("args", "problem"), [
    (["--scheduling-policy", "lof"],
     "argument --scheduling-policy: invalid choice: 'lof' (choose from 'fcfs', 'priority')"),
    (["--max-num-seqs", "many"], "argument --max-num-seqs: invalid int value: 'many'"),
    (["--gpu-memory-utilization", "0.9x"],
     "argument --gpu-memory-utilization: invalid float value: '0.9x'"),
    (["--num-scheduler-steps", "8"], "unrecognized arguments: --num-scheduler-steps 8"),
    (["--max-num-seqs"], "argument --max-num-seqs: expected one argument"),
    (["--max-num-seqs", "--enforce-eager"], "argument --max-num-seqs: expected one argument"),
    (["--enforce-eager=yes"], "argument --enforce-eager: ignored explicit argument 'yes'"),
    # an option of several spellings is named by all of them, as argparse names it
    (["-tp", "two"], "argument --tensor-parallel-size/-tp: invalid int value: 'two'"),
    (["--no-enable-prefix-caching=1"],
     "argument --enable-prefix-caching/--no-enable-prefix-caching: ignored explicit argument '1'"),
    (["--max-num-batched-tokens", "8kk"],
     "argument --max-num-batched-tokens: invalid human_readable_int value: '8kk'"),
    (["--max-model-len", "1.5K"], "argument --max-model-len: Decimals are not allowed with "
                                  "binary suffixes like K. Did you mean to use 1.5k instead?"),
    (["--served-model-name"], "argument --served-model-name: expected at least one argument"),
    (["--max-num", "8"],
     "ambiguous option: --max-num could match --max-num-seqs, --max-num-batched-tokens"),
    (["--num_scheduler_steps", "8"], "unrecognized arguments: --num-scheduler-steps 8"),
    (["-O", "fast"], "unrecognized arguments: -O fast"),  # vLLM takes -O only before 0-3
    (["--unknown.key", "1"], "unrecognized arguments: --unknown.key 1"),
])
def test_refused_in_argparse_words(args: list[str], problem: str) -> None:
    assert _installed().check_argv(args) == [problem]


def test_every_problem_is_reported_at_once() -> None:
    """Argparse stops at its first refusal; the check goes on past it, so one edit fixes all."""
    args = ["--max-num-seqs", "many", "--bogus", "1", "--scheduling-policy", "lof",
            "--enforce-eager=yes", "--seed", "7"]
    assert _installed().check_argv(args) == [
        "argument --max-num-seqs: invalid int value: 'many'",
        "argument --scheduling-policy: invalid choice: 'lof' (choose from 'fcfs', 'priority')",
        "argument --enforce-eager: ignored explicit argument 'yes'",
        "unrecognized arguments: --bogus 1",
    ]


def test_refusals_come_in_argparse_order_and_nothing_exits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An ambiguous abbreviation is refused before any value (argparse reads every option's
    spelling first), and argparse's own exit on it is turned into a problem line."""
    problems = _installed().check_argv(["--seed", "x", "--max-num", "8", "--stray"])
    assert problems == [
        "ambiguous option: --max-num could match --max-num-seqs, --max-num-batched-tokens",
        "argument --seed: invalid int value: 'x'",
        "unrecognized arguments: --stray",
    ]
    assert capsys.readouterr() == ("", "")


def test_missing_interpreter_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SweetspotError, match="no such interpreter"):
        detect_vllm(tmp_path / "nope" / "python", use_cache=False)


def test_interpreter_without_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "python"  # an interpreter that cannot import vllm
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'vllm'\" >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(SweetspotError, match="has no vLLM"):
        detect_vllm(fake)


def test_dump_is_cached_per_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slow import runs once: a second detection reads the cache file."""
    calls = tmp_path / "calls"
    payload = json.dumps({"version": "0.24.0", "path": "x", "options": [
        {"strings": ["--max-num-seqs"], "nargs": None, "choices": None, "type": "int"}]})
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'SWEETSPOT-VLLM {payload}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = detect_vllm(fake)
    second = detect_vllm(fake)
    assert first.version == second.version == Version("0.24.0")
    assert second.check_argv(["--max-num-seqs", "8"]) == []
    assert calls.read_text().count("x") == 1


# The installed server's real parser on a list of argvs: None where it takes one, else its last
# word (its error(), which would print usage and exit, raises instead).
_REAL_PARSER = r"""
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser

class Refused(Exception):
    pass

def refuse(message):
    raise Refused(message)

parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
parser.error = refuse
said = []
for argv in json.loads(sys.argv[1]):
    try:
        parser.parse_args(["model", *argv])
        said.append(None)
    except Refused as exc:
        said.append(str(exc))
print("REAL " + json.dumps(said))
"""


@pytest.mark.vllm
def test_the_installed_parser_says_the_same(vllm_python: Path) -> None:
    """The rebuilt parser takes what the real one takes and refuses the rest in its very words
    (the real parser runs once, in one vLLM import of ~15 s; no server starts)."""
    argvs = [
        ["--max_num_seqs", "8", "-tp", "1", "--enforce-eager", "--no-enable-prefix-caching"],
        ["-O3", "--compilation-config.mode", "3", "--scheduling", "priority"],
        ["--max-model-len", "auto", "--max-num-batched-tokens", "8k", "--seed", "-1"],
        ["--served-model-name", "a", "b", "--gpu-memory-utilization=0.5"],
        ["--max-num-seqs", "many"], ["-tp", "two"], ["--enforce-eager=yes"], ["--dtype", "f8"],
        ["--max-num-seqs"], ["--served-model-name"], ["--max-num-batched-tokens", "1.5K"],
        ["--max-model-len", "lots"], ["--max-num-s", "8"], ["--num_scheduler_steps", "8"],
        ["-O", "fast"],
    ]
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run([str(vllm_python), "-c", _REAL_PARSER, json.dumps(argvs)],
                          capture_output=True, text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL)
    said = [line for line in done.stdout.splitlines() if line.startswith("REAL ")]
    assert said, done.stderr[-2000:]
    real = json.loads(said[0].removeprefix("REAL "))
    installed = detect_vllm(vllm_python)
    assert [installed.check_argv(argv) for argv in argvs] == [[r] if r else [] for r in real]
