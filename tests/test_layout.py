"""The package's shape: no function over 60 lines and no module over 400 under src/sweetspot
(issue 19). The offenders left from before that rule are listed with their size today: the list
may only shrink (a listed one that grows, a new offender, or a listed one fixed but not struck
off all fail here), and issue 19 is done when it is empty."""

from __future__ import annotations

import ast
from pathlib import Path

import sweetspot

ROOT = Path(sweetspot.__file__).parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400

# Left to cut (issue 19, items 1, 3 and 6): the line counts they may not exceed meanwhile.
KNOWN_MODULES: dict[str, int] = {}
KNOWN_FUNCTIONS: dict[str, int] = {}


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                key = f"{name}:{node.name}"
                size = node.end_lineno - node.lineno + 1
                functions[key] = max(size, functions.get(key, 0))
    return modules, functions


def _check(sizes: dict[str, int], known: dict[str, int], limit: int, what: str) -> list[str]:
    problems = []
    for name, size in sorted(sizes.items()):
        if size > limit and name not in known:
            problems.append(f"{name}: {size} lines (a {what} may have {limit})")
        elif name in known and size > known[name]:
            problems.append(f"{name}: {size} lines, grown past its {known[name]} (cut it)")
    for name in sorted(known):
        if sizes.get(name, 0) <= limit:
            problems.append(f"{name}: now {sizes.get(name, 0)} lines: strike it off the list")
    return problems


def test_no_function_over_60_lines_and_no_module_over_400() -> None:
    modules, functions = _sizes()
    problems = (_check(modules, KNOWN_MODULES, MAX_MODULE_LINES, "module")
                + _check(functions, KNOWN_FUNCTIONS, MAX_FUNCTION_LINES, "function"))
    assert not problems, "\n".join(problems)
