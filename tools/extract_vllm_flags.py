#!/usr/bin/env python3
"""Extract the command-line options of ``vllm serve`` for several vLLM versions.

What it reads
-------------
A folder (default ``/tmp/vw/src``) holding one sub-folder per vLLM version,
named after the version (``0.8.0``, ``0.10.1.1``, ...), each containing a
partial copy of that version's wheel: ``<version>/vllm/...``.  The files that
matter are

* ``vllm/entrypoints/cli/serve.py`` -- ``ServeSubcommand.subparser_init``, the
  entry point that is followed (0.7.3 on); before it, ``vllm/scripts.py`` --
  the statements of ``main()`` that use the ``serve`` sub-parser (0.6.0-0.7.2);
* the module that defines ``make_arg_parser`` (``entrypoints/openai/cli_args.py``
  up to 0.28, ``entrypoints/launchers/cli_args.py`` / ``entrypoints/common/
  cli_args.py`` later), including the ``FrontendArgs`` dataclass when present;
* ``vllm/engine/arg_utils.py`` -- ``EngineArgs.add_cli_args``,
  ``AsyncEngineArgs.add_cli_args`` and ``get_kwargs`` / ``_compute_kwargs``;
* ``vllm/config.py`` or ``vllm/config/*.py`` (and anything else that is
  present) to resolve the type annotations of config dataclass fields;
* ``vllm/utils.py`` / ``vllm/utils/argparse_utils.py`` to see whether the
  ``-O`` shorthand is rewritten by ``FlexibleArgumentParser``.

The table in the package was generated from the ``.py`` files of ``vllm/config``,
``vllm/utils``, ``vllm/entrypoints`` and ``vllm/engine`` (plus ``vllm/config.py``,
``vllm/utils.py`` and ``vllm/scripts.py``) of the wheels of 0.6.0, 0.6.1, 0.6.1.post2,
0.6.2, 0.6.3, 0.6.3.post1, 0.6.4, 0.6.4.post1, 0.6.5, 0.6.6, 0.6.6.post1, 0.7.0-0.7.3,
0.8.0, 0.9.0, 0.10.0, 0.10.1.1, 0.10.2 and 0.11.0-0.34.0 (``sampled_versions``); a
larger subset resolves more ``choices``, a smaller one fewer.  In 0.6 both a release and
its ``.postN`` are sampled, so that either is judged by its own flags.

Size (issue 19's rule: no function over 60 lines, no module over 400, ``tools/`` included or
justified): this is a build-time tool, not part of the package, run when a vLLM release is
added. It is one abstract interpreter, and its four longest functions (``exec_stmt``,
``atoms``, ``call_method``, ``_field_kwargs``: 61-76 lines) are flat dispatch tables over
``ast`` node kinds and call shapes, one short branch each; split across modules they would
only scatter the cases a reader compares side by side. It stays one file.

Nothing is imported or executed: all files are parsed with ``ast``.  The
functions that register arguments are walked by a small abstract interpreter
(assignments, dict/list mutation, ``if``/``for`` over literal data, calls to
``get_kwargs(SomeConfig)``, ``cls._customize_cli_kwargs``, ``super()``,
``make_arg_parser``, ``*.add_cli_args``).  ``get_kwargs`` itself is not run; it
is re-implemented (``KwargsEmulator``) following the branches of vLLM's
``_compute_kwargs`` (dataclass -> JSON, ``bool | str | None`` -> optional
value, ``bool`` -> ``BooleanOptionalAction``, ``Literal`` -> choices (or
metavar when ``str`` is also allowed), tuple/list/set -> nargs, int (with the
human-readable-int field names read from each version's source), float,
dict -> JSON, otherwise str); the version-dependent bits of that function are
detected from each version's source text.

What it writes
--------------
JSON (pretty-printed, sorted keys)::

    {"generated_from": "...", "sampled_versions": [...],
     "flags": {"--name": {"aliases": [...], "spans": [[first, last], ...],
                          "kind": "bool|int|float|str|json|list|unknown",
                          "negatable": bool, "choices": [...]?, ...}}}

* ``spans`` are inclusive runs of *sampled* versions in which the option is
  registered; ``aliases`` are the other option strings of the same
  ``add_argument`` call, unioned over versions; ``aliases_from`` maps an
  alias to the first sampled version that has it when it is not present in
  every version of the flag.
* ``kind``: "bool" = switch taking no value (store_true / store_const /
  BooleanOptionalAction / the old optional-valued ``StoreBoolean``); "json" =
  dict or config dataclass parsed from JSON (also dict-or-str fields);
  "list" = nargs ``+``/``*``/N or ``action="append"`` (then ``"repeatable":
  true``); "unknown" = value is passed to a callable we cannot classify (e.g.
  ``type=bool``).  When the kind changed between versions the latest
  version's kind is used and ``kind_by_version`` lists ``[kind, first, last]``.
* ``negatable``: a ``--no-<name>`` form exists (BooleanOptionalAction); if
  only in some versions, ``negatable_from`` gives the first such version
  (and ``negatable_until`` the last, when it stopped being negatable).
* ``choices``: only when statically resolvable (explicit literal lists,
  ``Literal[...]`` annotations / aliases, ``get_args(Literal)``, Enum values)
  in the *latest* sampled version that has the flag; ``None`` is dropped.
  Older versions may have accepted fewer (or other) values.
* ``accepts_suffix``: value goes through ``human_readable_int`` (``8k``,
  ``1M``) or ``human_readable_int_or_auto`` (also ``auto``/``-1``);
  ``accepts_suffix_from`` when not in every version where the flag exists.
* ``optional_value``: the flag may be given bare or with a value
  (``nargs="?"`` with ``const``).
* ``deprecated_from``: first sampled version where the option is registered
  with ``deprecated=True`` or a help text starting with ``[DEPRECATED]``
  (only if still deprecated in the last version that has it).
* ``-O`` is recorded as its own entry (kind "str"): in 0.6.5-0.11 it is an
  alias of ``--compilation-config``; from 0.12 ``FlexibleArgumentParser``
  rewrites ``-O<n>`` to ``--optimization-level``.  It is not listed among the
  aliases of ``--compilation-config``.

Limits
------
* Only what is present in the extracted subset can be resolved.  Literal type
  aliases or registries that live in modules that were not extracted (e.g.
  ``QuantizationMethods``, tool/reasoning parser registries, platform-specific
  device lists) yield no ``choices``; their kind falls back to what vLLM's
  own logic does for an unknown non-builtin type (``str``).  Run with
  ``--verbose`` to list unresolved names and interpreter warnings.
* Choices built at run time (``permutations``, registries, platform checks)
  are omitted.
* Arguments added by out-of-tree platform plugins
  (``current_platform.pre_register_and_update``) or by ``vllm.plugins`` are
  not seen.  Dotted JSON sub-keys (``--compilation-config.mode``) are not
  listed as separate flags; positional ``model_tag`` is ignored.
* ``choices`` and ``aliases`` are per flag, not per version.

Usage::

    python tools/extract_vllm_flags.py [SRC_DIR] [-o OUTPUT] [--verbose]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import json
import sys
from pathlib import Path

from packaging.version import Version

GENERATED_FROM = "vllm wheels from PyPI, sources read statically by tools/extract_vllm_flags.py"
DEFAULT_SRC = "/tmp/vw/src"
DEFAULT_OUT = (
    Path(__file__).resolve().parent.parent
    / "src"
    / "sweetspot"
    / "engine"
    / "data"
    / "vllm_flags.json"
)

BUILTIN_TYPE_NAMES = {
    "int",
    "float",
    "str",
    "bool",
    "dict",
    "list",
    "tuple",
    "set",
    "frozenset",
    "bytes",
    "object",
    "type",
    "complex",
}
TYPING_MODULES = {"typing", "typing_extensions", "collections.abc", "types"}
# callables used as argparse ``type=`` whose meaning is known by name
KNOWN_TYPE_FUNCS = {
    "nullable_str": "str",
    "optional_str": "str",
    "parse_reasoning_parser": "str",
    "human_readable_int": "hr_int",
    "human_readable_int_or_auto": "hr_int_or_auto",
    "union_dict_and_str": "json",
    "nullable_kvs": "str",  # "key=value,key2=value2" string, not JSON
    "from_cli": "json",  # SomeConfig.from_cli: JSON (or a bare level for -O)
    "from_json": "json",
}
# functions whose bodies are interpreted when called
INTERPRETED_FUNCS = {"make_arg_parser", "add_cli_args", "_customize_cli_kwargs", "subparser_init"}


def version_key(v: str) -> Version:
    return Version(v)  # "0.6.1.post2" sorts after "0.6.1", before "0.6.2"


# --------------------------------------------------------------------------
# values used by the interpreter
# --------------------------------------------------------------------------
class Opaque:
    """A value that cannot be determined statically."""

    def __init__(self, text: str = "?"):
        self.text = text

    def __repr__(self):
        return f"Opaque({self.text})"


class Sym:
    """Symbolic argparse value: cat in {"type", "action"}."""

    def __init__(self, cat: str, name: str):
        self.cat, self.name = cat, name

    def __repr__(self):
        return f"Sym({self.cat}:{self.name})"

    def __deepcopy__(self, memo):
        return self


class Parser:
    def __repr__(self):
        return "PARSER"

    def __deepcopy__(self, memo):
        return self


PARSER = Parser()


class ModRef:
    def __init__(self, mod: str):
        self.mod = mod


class ClassRef:
    def __init__(self, mod: str, node: ast.ClassDef):
        self.mod, self.node = mod, node

    @property
    def name(self):
        return self.node.name

    def __deepcopy__(self, memo):
        return self


class FuncRef:
    def __init__(self, mod, node, owner=None, bound=None, kind="function"):
        self.mod, self.node = mod, node
        self.owner = owner  # ClassRef where the method is defined
        self.bound = bound  # ClassRef bound to ``cls``
        self.kind = kind  # function | classmethod | staticmethod | method

    @property
    def name(self):
        return self.node.name

    def __deepcopy__(self, memo):
        return self


class ExtRef:
    """Something imported from outside the extracted sources."""

    def __init__(self, mod: str, name: str):
        self.mod, self.name = mod, name

    def __deepcopy__(self, memo):
        return self


class BuiltinFn:
    def __init__(self, name):
        self.name = name


class BoundMethod:
    def __init__(self, obj, name):
        self.obj, self.name = obj, name


class SuperRef:
    def __init__(self, owner: ClassRef, bound: ClassRef):
        self.owner, self.bound = owner, bound


class EnumMember:
    def __init__(self, name, value):
        self.name, self.value = name, value


class LambdaVal:
    def __init__(self, node):
        self.node = node

    def __deepcopy__(self, memo):
        return self


class ReturnSignal(Exception):
    def __init__(self, value):
        self.value = value


def concrete(v) -> bool:
    """True if v is plain data (no Opaque inside)."""
    if isinstance(v, Opaque):
        return False
    if isinstance(v, (list, tuple, set)):
        return all(concrete(x) for x in v)
    if isinstance(v, dict):
        return all(concrete(x) for x in v.values())
    return True


# --------------------------------------------------------------------------
# module index and name resolution
# --------------------------------------------------------------------------
class ModuleIndex:
    def __init__(self, root: Path):
        self.root = root
        self.paths: dict[str, Path] = {}
        for p in sorted((root / "vllm").rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.paths[".".join(parts)] = p
        self._trees: dict[str, ast.Module | None] = {}
        self._defs: dict[str, tuple[dict, list]] = {}
        self.unresolved: set[str] = set()

    def has(self, mod: str) -> bool:
        return mod in self.paths

    def is_package(self, mod: str) -> bool:
        return mod in self.paths and self.paths[mod].name == "__init__.py"

    def tree(self, mod: str):
        if mod not in self._trees:
            p = self.paths.get(mod)
            self._trees[mod] = ast.parse(p.read_text()) if p else None
        return self._trees[mod]

    def source(self, mod: str) -> str:
        p = self.paths.get(mod)
        return p.read_text() if p else ""

    def _abs(self, mod: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = mod if self.is_package(mod) else mod.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{node.module}" if node.module else base

    def defs(self, mod: str):
        """name -> list of (priority, entry); plus list of star-import modules.

        priority 1 = runtime definition, 0 = only under ``if TYPE_CHECKING``.
        """
        if mod in self._defs:
            return self._defs[mod]
        table: dict[str, list] = {}
        stars: list[str] = []
        tree = self.tree(mod)

        def add(name, entry, prio):
            table.setdefault(name, []).append((prio, entry))

        def walk(body, prio):
            for st in body:
                if isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(st.name, ("node", st), prio)
                elif isinstance(st, ast.Assign):
                    for t in st.targets:
                        if isinstance(t, ast.Name):
                            add(t.id, ("value", st.value), prio)
                elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    if st.value is not None:
                        add(st.target.id, ("value", st.value), prio)
                elif isinstance(st, ast.ImportFrom):
                    target = self._abs(mod, st)
                    for a in st.names:
                        if a.name == "*":
                            stars.append(target)
                        else:
                            add(a.asname or a.name, ("import", target, a.name), prio)
                elif isinstance(st, ast.Import):
                    for a in st.names:
                        if a.asname:
                            add(a.asname, ("module", a.name), prio)
                        else:
                            top = a.name.split(".")[0]
                            add(top, ("module", top), prio)
                elif isinstance(st, ast.If):
                    tc = "TYPE_CHECKING" in ast.unparse(st.test)
                    walk(st.body, 0 if tc else prio)
                    walk(st.orelse, prio)
                elif isinstance(st, ast.Try):
                    walk(st.body, prio)
                    for h in st.handlers:
                        walk(h.body, prio)
                    walk(st.orelse, prio)
                    walk(st.finalbody, prio)
                elif isinstance(st, ast.With):
                    walk(st.body, prio)

        if tree is not None:
            walk(tree.body, 1)
        self._defs[mod] = (table, stars)
        return self._defs[mod]

    def resolve(self, mod: str, name: str, depth: int = 0):
        """Resolve a top-level name of ``mod``.

        Returns ("node", mod, node) | ("value", mod, expr) | ("module", m) |
        ("external", m, name) | ("unresolved", m, name) | None.
        """
        if depth > 40:
            return ("unresolved", mod, name)
        table, stars = self.defs(mod)
        entries = table.get(name)
        if not entries:
            for s in stars:
                if self.has(s):
                    r = self.resolve(s, name, depth + 1)
                    if r is not None:
                        return r
            return None
        # prefer runtime definitions, last one wins
        best = max(range(len(entries)), key=lambda i: (entries[i][0], i))
        entry = entries[best][1]
        if entry[0] == "node":
            return ("node", mod, entry[1])
        if entry[0] == "value":
            return ("value", mod, entry[1])
        if entry[0] == "module":
            return ("module", entry[1])
        _, target, orig = entry
        if self.has(f"{target}.{orig}"):
            return ("module", f"{target}.{orig}")
        if self.has(target):
            r = self.resolve(target, orig, depth + 1)
            if r is not None:
                return r
            return ("unresolved", target, orig)
        if target.split(".")[0] == "vllm":
            return ("unresolved", target, orig)
        return ("external", target, orig)


# --------------------------------------------------------------------------
# type annotations -> "atoms"
# --------------------------------------------------------------------------
# atoms: ("none",) ("builtin", n) ("generic", origin, [arg atom lists], typing)
#        ("literal", values) ("dataclass", n) ("dictsub", n) ("other", n)
#        ("unresolved", n) ("ellipsis",) ("classvar",)
class TypeResolver:
    def __init__(self, index: ModuleIndex):
        self.ix = index

    def qualify(self, mod: str, node, depth=0):
        """Name/Attribute -> ('typing', n) | ('builtin', n) | resolve() tuple."""
        if isinstance(node, ast.Name):
            r = self.ix.resolve(mod, node.id)
            if r is None:
                if node.id in BUILTIN_TYPE_NAMES:
                    return ("builtin", node.id)
                if node.id == "None":
                    return ("none",)
                return ("unresolved", mod, node.id)
            if r[0] == "external" and r[1] in TYPING_MODULES:
                return ("typing", r[2])
            return r
        if isinstance(node, ast.Attribute):
            base = self.qualify(mod, node.value, depth + 1)
            if base[0] == "module":
                m = base[1]
                if m in TYPING_MODULES:
                    return ("typing", node.attr)
                if self.ix.has(m):
                    r = self.ix.resolve(m, node.attr)
                    return r if r is not None else ("unresolved", m, node.attr)
                return ("external", m, node.attr)
            if base[0] == "external":
                return ("external", f"{base[1]}.{base[2]}", node.attr)
            return ("other_attr", ast.unparse(node))
        return ("unknown_expr", ast.unparse(node))

    def is_dataclass_class(self, mod, cls: ast.ClassDef, depth=0) -> bool:
        for d in cls.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            txt = ast.unparse(target)
            if txt.split(".")[-1] in ("dataclass", "config") or txt.endswith(
                "dataclasses.dataclass"
            ):
                return True
        if depth < 10:
            for b in cls.bases:
                q = self.qualify(mod, b)
                if (
                    q[0] == "node"
                    and isinstance(q[2], ast.ClassDef)
                    and self.is_dataclass_class(q[1], q[2], depth + 1)
                ):
                    return True
        return False

    def class_kind(self, mod, cls: ast.ClassDef) -> tuple:
        if self.is_dataclass_class(mod, cls):
            return ("dataclass", cls.name)
        for b in cls.bases:
            q = self.qualify(mod, b if not isinstance(b, ast.Subscript) else b.value)
            if q in (("builtin", "dict"), ("typing", "Dict")):
                return ("dictsub", cls.name)
            if q == ("typing", "TypedDict"):
                return ("other", cls.name)
        return ("other", cls.name)

    def atoms(self, mod: str, node, depth: int = 0) -> list:
        if depth > 30:
            return [("unresolved", "<recursion>")]
        if node is None:
            return [("none",)]
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [("none",)]
            if node.value is Ellipsis:
                return [("ellipsis",)]
            if isinstance(node.value, str):
                try:
                    return self.atoms(mod, ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return [("unresolved", node.value)]
            return [("other", repr(node.value))]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.atoms(mod, node.left, depth + 1) + self.atoms(mod, node.right, depth + 1)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self._atoms_from_q(self.qualify(mod, node), node, depth)
        if isinstance(node, ast.Subscript):
            q = self.qualify(mod, node.value)
            args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            name = q[1] if q[0] in ("typing", "builtin") else None
            if q[0] == "typing" and name == "Optional":
                return [*self.atoms(mod, args[0], depth + 1), ("none",)]
            if q[0] == "typing" and name == "Union":
                out = []
                for a in args:
                    out += self.atoms(mod, a, depth + 1)
                return out
            if q[0] == "external" and q[2] == "SkipValidation":
                # pydantic: SkipValidation[X] is Annotated[X, SkipValidation()]
                return self.atoms(mod, args[0], depth + 1)
            if q[0] == "typing" and name == "Annotated":
                return self.atoms(mod, args[0], depth + 1)
            if q[0] == "typing" and name in ("ClassVar", "InitVar", "Final"):
                if name == "Final":
                    return self.atoms(mod, args[0], depth + 1)
                return [("classvar",)]
            if q[0] == "typing" and name == "Literal":
                return [("literal", self.literal_values(mod, args, depth))]
            origin_map = {
                "List": "list",
                "Dict": "dict",
                "Tuple": "tuple",
                "Set": "set",
                "Type": "type",
                "FrozenSet": "frozenset",
            }
            if q[0] == "builtin" and name in ("list", "dict", "tuple", "set", "type", "frozenset"):
                return [("generic", name, [self.atoms(mod, a, depth + 1) for a in args], False)]
            if q[0] == "typing" and name in origin_map:
                return [
                    (
                        "generic",
                        origin_map[name],
                        [self.atoms(mod, a, depth + 1) for a in args],
                        True,
                    )
                ]
            if q[0] == "typing":
                return [("other", f"typing.{name}")]
            # user generic class, e.g. SomeClass[int]
            return self._atoms_from_q(q, node.value, depth)
        return [("unresolved", ast.unparse(node))]

    def _atoms_from_q(self, q, node, depth) -> list:
        kind = q[0]
        if kind == "builtin":
            return [("builtin", q[1])]
        if kind == "none":
            return [("none",)]
        if kind == "typing":
            if q[1] in ("Any", "Callable", "Sequence", "Mapping", "Iterable"):
                return [("other", f"typing.{q[1]}")]
            legacy = {"List": "list", "Dict": "dict", "Tuple": "tuple", "Set": "set"}
            if q[1] in legacy:
                return [("builtin", legacy[q[1]])]
            if q[1] == "NoneType":
                return [("none",)]
            return [("other", f"typing.{q[1]}")]
        if kind == "node":
            _, m, n = q
            if isinstance(n, ast.ClassDef):
                return [self.class_kind(m, n)]
            return [("other", getattr(n, "name", "?"))]
        if kind == "value":
            _, m, expr = q
            if isinstance(expr, ast.Call):
                fn = ast.unparse(expr.func).split(".")[-1]
                if fn == "TypeAliasType" and len(expr.args) >= 2:
                    return self.atoms(m, expr.args[1], depth + 1)
                return [("other", ast.unparse(node))]
            return self.atoms(m, expr, depth + 1)
        if kind == "module":
            return [("other", q[1])]
        if kind == "external":
            if q[1] == "builtins":
                return [("builtin", q[2])]
            return [("other", f"{q[1]}.{q[2]}")]
        name = ast.unparse(node)
        self.ix.unresolved.add(name)
        return [("unresolved", name)]

    def literal_values(self, mod, args, depth) -> list:
        vals = []
        for a in args:
            if isinstance(a, ast.Constant):
                vals.append(a.value)
            elif isinstance(a, (ast.Name, ast.Attribute, ast.Subscript)):
                sub = self.atoms(mod, a, depth + 1)
                for s in sub:
                    if s[0] == "literal":
                        vals.extend(s[1])
                    else:
                        vals.append(Opaque(ast.unparse(a)))
            else:
                vals.append(Opaque(ast.unparse(a)))
        return vals

    def class_fields(self, mod: str, cls: ast.ClassDef, depth=0) -> dict:
        """Ordered dataclass fields: name -> (module, annotation)."""
        out: dict = {}
        if depth < 10:
            for b in cls.bases:
                q = self.qualify(mod, b)
                if (
                    q[0] == "node"
                    and isinstance(q[2], ast.ClassDef)
                    and self.is_dataclass_class(q[1], q[2])
                ):
                    out.update(self.class_fields(q[1], q[2], depth + 1))
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                ann_txt = ast.unparse(st.annotation)
                if ann_txt.split("[")[0].split(".")[-1] in ("ClassVar", "InitVar", "KW_ONLY"):
                    continue
                name = st.target.id
                out[name] = (mod, st.annotation)
        return out


# --------------------------------------------------------------------------
# get_kwargs emulation
# --------------------------------------------------------------------------
class KwargsEmulator:
    """Re-implementation of vLLM's ``get_kwargs``/``_compute_kwargs``."""

    def __init__(self, index: ModuleIndex, types: TypeResolver):
        self.ix, self.types = index, types
        src = index.source("vllm.engine.arg_utils")
        tree = index.tree("vllm.engine.arg_utils")
        fn = None
        lit = None
        for node in tree.body if tree else []:
            if isinstance(node, ast.FunctionDef):
                if node.name == "_compute_kwargs" or (node.name == "get_kwargs" and fn is None):
                    fn = node
                if node.name == "literal_to_kwargs":
                    lit = node
        self.available = fn is not None
        fsrc = ast.unparse(fn) if fn else ""
        self.opt_valued = "{bool, str, type(None)}" in fsrc
        self.dictsub = "is_dict_subclass" in fsrc
        self.has_set = "contains_type(type_hints, set)" in fsrc
        self.metavar_literal = lit is not None and "metavar" in ast.unparse(lit)
        self.hr: dict[str, str] = self._human_readable(fn) if fn else {}
        self.source = src
        self._cache: dict[str, dict] = {}

    @staticmethod
    def _human_readable(fn: ast.FunctionDef) -> dict:
        sets: dict[str, list[str]] = {}
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, (ast.Set, ast.List, ast.Tuple))
            ):
                sets[n.targets[0].id] = [
                    e.value for e in n.value.elts if isinstance(e, ast.Constant)
                ]
        out: dict[str, str] = {}
        for n in ast.walk(fn):
            if not isinstance(n, ast.If):
                continue
            func = None
            for st in n.body:
                if (
                    isinstance(st, ast.Assign)
                    and isinstance(st.value, ast.Name)
                    and st.value.id.startswith("human_readable")
                ):
                    func = st.value.id
            if not func:
                continue
            names: list[str] = []
            for c in ast.walk(n.test):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    names.append(c.value)
                elif isinstance(c, ast.Name) and c.id in sets:
                    names.extend(sets[c.id])
            for nm in names:
                out[nm] = "hr_int_or_auto" if func.endswith("or_auto") else "hr_int"
        return out

    def get_kwargs(self, cref: ClassRef) -> dict:
        key = f"{cref.mod}.{cref.name}"
        if key not in self._cache:
            self._cache[key] = self._compute(cref)
        return copy.deepcopy(self._cache[key])

    def _compute(self, cref: ClassRef) -> dict:
        out = {}
        for name, (fmod, ann) in self.types.class_fields(cref.mod, cref.node).items():
            hints = self._flatten(self.types.atoms(fmod, ann))
            out[name] = self._field_kwargs(name, hints)
        return out

    def _flatten(self, atoms):
        res = []
        for a in atoms:
            if a[0] == "dictsub":
                a = ("builtin", "dict") if self.dictsub else ("other", a[1])
            if a not in res:
                res.append(a)
        return res

    @staticmethod
    def _is(a, t):
        return (a[0] == "builtin" and a[1] == t) or (a[0] == "generic" and a[1] == t)

    def _has(self, hints, t):
        return any(self._is(a, t) for a in hints)

    @staticmethod
    def _nonbuiltin(a):
        return a[0] in ("literal", "dataclass", "other", "unresolved") or (
            a[0] == "generic" and a[3]
        )

    def _is_dataclass_atom(self, a):
        if a[0] == "dataclass":
            return True
        # unresolved *Config names are almost certainly config dataclasses
        return a[0] == "unresolved" and str(a[1]).endswith("Config")

    def _literal_kwargs(self, lit_vals, str_too):
        vals = list(lit_vals)
        first = vals[0] if vals else ""
        t = {bool: "bool_type", int: "int", float: "float"}.get(type(first), "str")
        kw = {"type": Sym("type", t)}
        if str_too and self.metavar_literal:
            kw["metavar"] = Opaque("literal")
        else:
            kw["choices"] = vals
        return kw

    def _field_kwargs(self, name, hints) -> dict:
        kw: dict = {"default": Opaque("default"), "help": Opaque("help")}
        has = lambda t: self._has(hints, t)  # noqa: E731
        lits = [a for a in hints if a[0] == "literal"]
        kinds = {a[0] for a in hints}
        if any(self._is_dataclass_atom(a) for a in hints):
            kw["type"] = Sym("type", "json")
        elif self.opt_valued and {
            (a[0], a[1] if len(a) > 1 and isinstance(a[1], str) else "") for a in hints
        } == {("builtin", "bool"), ("builtin", "str"), ("none", "")}:
            kw.update(type=Sym("type", "str"), nargs="?", const=True)
        elif has("bool"):
            kw["action"] = Sym("action", "BooleanOptionalAction")
        elif lits:
            vals = []
            for lt in lits:
                vals += [v for v in lt[1] if v not in vals]
            kw.update(self._literal_kwargs(vals, has("str")))
        elif has("tuple") or has("list") or (self.has_set and has("set")):
            coll = "tuple" if has("tuple") else "list" if has("list") else "set"
            g = next(a for a in hints if self._is(a, coll))
            elem = g[2][0] if g[0] == "generic" and g[2] else [("builtin", "str")]
            nargs = "+"
            if (
                coll == "tuple"
                and g[0] == "generic"
                and not any(x == [("ellipsis",)] for x in g[2])
            ):
                nargs = len(g[2])
            kw["nargs"] = nargs
            elem_lits = [a for a in elem if a[0] == "literal"]
            if elem_lits:
                kw.update(self._literal_kwargs(elem_lits[0][1], False))
            elif len(elem) > 1:
                kw["type"] = Sym("type", "str")
            else:
                e = elem[0]
                t = (
                    e[1]
                    if e[0] == "builtin" and e[1] in ("int", "float", "str")
                    else "str"
                    if self._nonbuiltin(e) or e[0] == "builtin"
                    else "unknown"
                )
                if self._is_dataclass_atom(e):
                    t = "json"
                kw["type"] = Sym("type", t)
        elif has("int"):
            kw["type"] = Sym("type", self.hr.get(name, "int"))
        elif has("float"):
            kw["type"] = Sym("type", "float")
        elif has("dict"):
            kw["type"] = Sym("type", "json")
        elif has("str") or any(self._nonbuiltin(a) for a in hints):
            kw["type"] = Sym("type", "str")
        else:
            kw["type"] = Sym("type", "unknown")
            kw["_why"] = f"unsupported hints {hints}"
        if "unresolved" in kinds:
            kw["_unresolved"] = [a[1] for a in hints if a[0] == "unresolved"]
        return kw


# --------------------------------------------------------------------------
# the abstract interpreter
# --------------------------------------------------------------------------
class Ctx:
    def __init__(self, mod, env=None, owner=None, bound=None):
        self.mod = mod
        self.env = env if env is not None else {}
        self.owner = owner  # ClassRef whose method is running (for super())
        self.bound = bound  # ClassRef bound to cls


class Interp:
    def __init__(self, index: ModuleIndex, verbose=False):
        self.ix = index
        self.types = TypeResolver(index)
        self.kw = KwargsEmulator(index, self.types)
        self.records: list[tuple[list[str], dict, str]] = []
        self.warnings: list[str] = []
        self.depth = 0
        self.verbose = verbose
        self._value_cache: dict = {}

    def warn(self, msg):
        self.warnings.append(msg)

    # ---- name lookup ----------------------------------------------------
    def lookup(self, ctx: Ctx, name: str):
        if name in ctx.env:
            return ctx.env[name]
        if name == "cls" and ctx.bound is not None:
            return ctx.bound
        return self.global_ref(ctx.mod, name)

    def global_ref(self, mod: str, name: str):
        r = self.ix.resolve(mod, name)
        if r is None:
            if name in BUILTIN_TYPE_NAMES:
                return (
                    Sym("type", name)
                    if name in ("int", "float", "str", "bool")
                    else BuiltinFn(name)
                )
            if name in ("sorted", "list", "get_args", "len", "super", "tuple", "print", "set"):
                return BuiltinFn(name)
            return Opaque(name)
        return self.from_resolved(r, name)

    def from_resolved(self, r, name):
        if r[0] == "node":
            _, m, n = r
            if isinstance(n, ast.ClassDef):
                return ClassRef(m, n)
            return FuncRef(m, n)
        if r[0] == "value":
            _, m, expr = r
            key = (m, name)
            if key in self._value_cache:
                return self._value_cache[key]
            self._value_cache[key] = Opaque(name)  # recursion guard
            try:
                v = self.ev(expr, Ctx(m))
            except Exception as e:  # pragma: no cover - defensive
                v = Opaque(f"{name}: {e}")
            self._value_cache[key] = v
            return v
        if r[0] == "module":
            return ModRef(r[1])
        if r[0] == "external":
            if r[1] in ("argparse", "json"):
                return self.ext_attr(r[1], r[2])
            if r[1] in TYPING_MODULES and r[2] == "get_args":
                return BuiltinFn("get_args")
            return ExtRef(r[1], r[2])
        return Opaque(f"unresolved {r[1]}.{r[2]}")

    def ext_attr(self, mod, attr):
        if mod == "argparse" and attr == "BooleanOptionalAction":
            return Sym("action", "BooleanOptionalAction")
        if mod == "json" and attr == "loads":
            return Sym("type", "json")
        return ExtRef(mod, attr)

    # ---- class helpers ----------------------------------------------------
    def mro(self, c: ClassRef) -> list[ClassRef]:
        out = [c]
        for b in c.node.bases:
            v = self.ev(b, Ctx(c.mod))
            if isinstance(v, ClassRef):
                for x in self.mro(v):
                    if all(x.node is not y.node for y in out):
                        out.append(x)
        return out

    def class_attr(self, c: ClassRef, attr: str, bound=None, start_after=None):
        chain = self.mro(c)
        if start_after is not None:
            idx = next((i for i, x in enumerate(chain) if x.node is start_after.node), -1)
            chain = chain[idx + 1 :]
        for k in chain:
            for st in k.node.body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == attr:
                    decos = {ast.unparse(d) for d in st.decorator_list}
                    kind = (
                        "classmethod"
                        if "classmethod" in decos
                        else "staticmethod"
                        if "staticmethod" in decos
                        else "method"
                    )
                    return FuncRef(k.mod, st, owner=k, bound=bound or c, kind=kind)
        if attr == "__name__":
            return c.name
        if attr in ("from_cli", "from_json"):
            return Sym("type", "json")
        return Opaque(f"{c.name}.{attr}")

    def enum_members(self, c: ClassRef):
        out = []
        for st in c.node.body:
            if (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and not st.targets[0].id.startswith("_")
            ):
                v = self.ev(st.value, Ctx(c.mod))
                out.append(EnumMember(st.targets[0].id, v))
        return out

    # ---- expressions -------------------------------------------------------
    def ev(self, node, ctx: Ctx):
        m = getattr(self, "ev_" + type(node).__name__, None)
        if m is None:
            return Opaque(ast.unparse(node)[:60])
        return m(node, ctx)

    def ev_Constant(self, n, ctx):
        return n.value

    def ev_Name(self, n, ctx):
        return self.lookup(ctx, n.id)

    def ev_Attribute(self, n, ctx):
        base = self.ev(n.value, ctx)
        a = n.attr
        if isinstance(base, ModRef):
            if base.mod in ("argparse", "json"):
                return self.ext_attr(base.mod, a)
            if self.ix.has(base.mod):
                r = self.ix.resolve(base.mod, a)
                return self.from_resolved(r, a) if r else Opaque(f"{base.mod}.{a}")
            return ExtRef(base.mod, a)
        if isinstance(base, ExtRef):
            return ExtRef(f"{base.mod}.{base.name}", a)
        if isinstance(base, ClassRef):
            return self.class_attr(base, a)
        if isinstance(base, SuperRef):
            return self.class_attr(base.bound, a, bound=base.bound, start_after=base.owner)
        if isinstance(base, EnumMember):
            return base.value if a == "value" else base.name if a == "name" else Opaque(a)
        if isinstance(base, (Parser, dict, list, str)):
            return BoundMethod(base, a)
        if isinstance(base, Opaque):
            return BoundMethod(base, a)
        return Opaque(ast.unparse(n)[:60])

    def ev_Subscript(self, n, ctx):
        base = self.ev(n.value, ctx)
        key = self.ev(n.slice, ctx)
        if isinstance(base, dict) and not isinstance(key, Opaque):
            if key in base:
                return base[key]
            self.warn(f"missing key {key!r} in {ast.unparse(n.value)[:50]}")
            return Opaque(f"missing {key}")
        if isinstance(base, (list, tuple)) and isinstance(key, int):
            try:
                return base[key]
            except IndexError:
                return Opaque("index")
        return Opaque(ast.unparse(n)[:60])

    def ev_Dict(self, n, ctx):
        out = {}
        for k, v in zip(n.keys, n.values, strict=True):
            if k is None:
                d = self.ev(v, ctx)
                if isinstance(d, dict):
                    out.update(d)
                else:
                    self.warn(f"cannot expand **{ast.unparse(v)[:50]}")
            else:
                kk = self.ev(k, ctx)
                if isinstance(kk, Opaque):
                    continue
                out[kk] = self.ev(v, ctx)
        return out

    def _seq(self, elts, ctx):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = self.ev(e.value, ctx)
                if isinstance(v, (list, tuple)):
                    out.extend(v)
                else:
                    out.append(Opaque("*" + ast.unparse(e.value)[:40]))
            else:
                out.append(self.ev(e, ctx))
        return out

    def ev_List(self, n, ctx):
        return self._seq(n.elts, ctx)

    def ev_Tuple(self, n, ctx):
        return tuple(self._seq(n.elts, ctx))

    def ev_Set(self, n, ctx):
        return self._seq(n.elts, ctx)

    def ev_JoinedStr(self, n, ctx):
        parts = []
        for v in n.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                x = self.ev(v.value, ctx)
                if not isinstance(x, (str, int, float)):
                    return Opaque("fstring")
                parts.append(str(x))
        return "".join(parts)

    def ev_BinOp(self, n, ctx):
        a, b = self.ev(n.left, ctx), self.ev(n.right, ctx)
        if isinstance(n.op, ast.Add):
            if isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(a, str) and isinstance(b, str):
                return a + b
        return Opaque(ast.unparse(n)[:60])

    def ev_UnaryOp(self, n, ctx):
        v = self.ev(n.operand, ctx)
        if isinstance(n.op, ast.Not) and isinstance(v, (bool, int, type(None), str)):
            return not v
        return Opaque("unary")

    def ev_BoolOp(self, n, ctx):
        vals = [self.ev(v, ctx) for v in n.values]
        if any(isinstance(v, Opaque) for v in vals) or not all(
            isinstance(v, (bool, int, str, type(None), list, dict)) for v in vals
        ):
            return Opaque("boolop")
        if isinstance(n.op, ast.And):
            return all(vals)
        return any(vals)

    def ev_Compare(self, n, ctx):
        left = self.ev(n.left, ctx)
        if len(n.ops) != 1:
            return Opaque("cmp")
        right = self.ev(n.comparators[0], ctx)
        op = n.ops[0]
        if isinstance(left, Opaque) or isinstance(right, Opaque):
            return Opaque("cmp")
        try:
            if isinstance(op, ast.In) and isinstance(right, (dict, list, tuple, str)):
                return left in right
            if isinstance(op, ast.NotIn) and isinstance(right, (dict, list, tuple, str)):
                return left not in right
            if isinstance(op, ast.Eq) and isinstance(left, (str, int, type(None))):
                return left == right
            if isinstance(op, ast.NotEq) and isinstance(left, (str, int, type(None))):
                return left != right
            if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None):
                same = left is right
                return same if isinstance(op, ast.Is) else not same
        except TypeError:
            pass
        return Opaque("cmp")

    def ev_IfExp(self, n, ctx):
        t = self.ev(n.test, ctx)
        if isinstance(t, (bool, int, type(None))):
            return self.ev(n.body if t else n.orelse, ctx)
        return Opaque("ifexp")

    def ev_Lambda(self, n, ctx):
        return LambdaVal(n)

    def ev_ListComp(self, n, ctx):
        if len(n.generators) != 1:
            return Opaque("listcomp")
        g = n.generators[0]
        it = self.ev(g.iter, ctx)
        if isinstance(it, ClassRef):
            it = self.enum_members(it)
        if not isinstance(it, (list, tuple)):
            return Opaque("listcomp")
        out = []
        for item in it:
            sub = Ctx(ctx.mod, dict(ctx.env), ctx.owner, ctx.bound)
            self.assign(g.target, item, sub)
            if all(self.ev(c, sub) is True for c in g.ifs):
                out.append(self.ev(n.elt, sub))
        return out

    def ev_Call(self, n, ctx):
        f = self.ev(n.func, ctx)
        if isinstance(f, BoundMethod) and f.name == "add_argument":
            self.record_add_argument(n, ctx)
            return Opaque("action")
        args = self._seq(n.args, ctx)
        kwargs = {}
        for k in n.keywords:
            if k.arg is None:
                d = self.ev(k.value, ctx)
                if isinstance(d, dict):
                    kwargs.update(d)
            else:
                kwargs[k.arg] = self.ev(k.value, ctx)
        return self.call(f, args, kwargs, n, ctx)

    def call(self, f, args, kwargs, n, ctx):
        if isinstance(f, BoundMethod):
            return self.call_method(f, args, kwargs)
        if isinstance(f, BuiltinFn):
            name = f.name
            if name == "super":
                if ctx.owner is None:
                    return Opaque("super")
                return SuperRef(ctx.owner, ctx.bound or ctx.owner)
            if name in ("list", "tuple", "sorted") and args:
                a = args[0]
                if isinstance(a, dict):
                    a = list(a)
                if isinstance(a, ClassRef):
                    a = self.enum_members(a)
                if isinstance(a, (list, tuple)):
                    try:
                        return sorted(a) if name == "sorted" else list(a)
                    except TypeError:
                        return list(a)
                return Opaque(name)
            if name == "get_args" and n.args:
                atoms = self.types.atoms(ctx.mod, n.args[0])
                lits = [a for a in atoms if a[0] == "literal"]
                if lits:
                    return list(lits[0][1])
                return Opaque("get_args")
            return Opaque(name)
        if isinstance(f, FuncRef):
            name = f.name
            if name == "get_kwargs" and args:
                target = args[0]
                if isinstance(target, ClassRef) and self.kw.available:
                    return self.kw.get_kwargs(target)
                self.warn(f"get_kwargs on {target!r}")
                return Opaque("get_kwargs")
            if name in ("optional_type", "parse_type") and args:
                inner = args[0]
                return inner if isinstance(inner, (Sym, FuncRef, LambdaVal)) else Opaque(name)
            if name in INTERPRETED_FUNCS or self._registers_args(f):
                return self.run_function(f, args, kwargs)
            return Opaque(name)
        if isinstance(f, ClassRef):
            return Opaque(f"{f.name}()")
        return Opaque("call")

    def _registers_args(self, f: FuncRef) -> bool:
        return f.mod.startswith("vllm.") and any(
            isinstance(x, ast.Attribute) and x.attr == "add_argument" for x in ast.walk(f.node)
        )

    def call_method(self, bm: BoundMethod, args, kwargs):
        obj, name = bm.obj, bm.name
        if name in ("add_parser", "add_argument_group", "add_mutually_exclusive_group"):
            return PARSER
        if isinstance(obj, dict):
            if name == "items":
                return list(obj.items())
            if name == "keys":
                return list(obj.keys())
            if name == "values":
                return list(obj.values())
            if name == "pop" and args and not isinstance(args[0], Opaque):
                return (
                    obj.pop(args[0], *args[1:2])
                    if (args[0] in obj or len(args) > 1)
                    else Opaque("pop")
                )
            if name == "get" and args and not isinstance(args[0], Opaque):
                return obj.get(args[0], *args[1:2])
            if name == "update" and args and isinstance(args[0], dict):
                obj.update(args[0])
                return None
            if name == "copy":
                return dict(obj)
        if isinstance(obj, list):
            if name == "remove" and args:
                if args[0] in obj:
                    obj.remove(args[0])
                elif isinstance(args[0], Opaque):
                    obj.append(Opaque("removed-unknown"))
                return None
            if name == "append" and args:
                obj.append(args[0])
                return None
            if name == "extend" and args:
                if isinstance(args[0], (list, tuple)):
                    obj.extend(args[0])
                else:
                    obj.append(Opaque("extend"))
                return None
        if (
            isinstance(obj, str)
            and all(isinstance(a, (str, int, list)) for a in args)
            and name
            in (
                "replace",
                "lower",
                "upper",
                "strip",
                "format",
                "join",
                "split",
                "removeprefix",
                "removesuffix",
            )
        ):
            try:
                return getattr(obj, name)(*args, **kwargs)
            except Exception:
                return Opaque("strmethod")
        return Opaque(f".{name}()")

    # ---- statements --------------------------------------------------------
    def assign(self, target, value, ctx):
        if isinstance(target, ast.Name):
            ctx.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value, strict=True):
                    self.assign(t, v, ctx)
            else:
                for t in target.elts:
                    self.assign(t, Opaque("unpack"), ctx)
        elif isinstance(target, ast.Subscript):
            cont = self.ev(target.value, ctx)
            key = self.ev(target.slice, ctx)
            if isinstance(cont, dict) and not isinstance(key, Opaque):
                cont[key] = value
            elif not isinstance(cont, Opaque):
                self.warn(f"cannot assign {ast.unparse(target)[:60]}")
        # attribute targets (parser.epilog = ...) are irrelevant

    def run_function(self, f: FuncRef, args, kwargs):
        if self.depth > 25:
            self.warn(f"recursion limit at {f.name}")
            return Opaque("deep")
        params = f.node.args
        names = [a.arg for a in params.posonlyargs + params.args]
        env = {}
        owner = f.owner
        bound = f.bound
        if f.kind in ("classmethod", "method") and names:
            env[names[0]] = bound if f.kind == "classmethod" else Opaque("self")
            names = names[1:]
        defaults = params.defaults
        fctx_mod = Ctx(f.mod)
        # defaults align to the end of positional params
        all_pos = [a.arg for a in params.posonlyargs + params.args]
        for i, d in enumerate(defaults):
            pname = all_pos[len(all_pos) - len(defaults) + i]
            env[pname] = self.ev(d, fctx_mod)
        for a, d in zip(params.kwonlyargs, params.kw_defaults, strict=True):
            env[a.arg] = self.ev(d, fctx_mod) if d is not None else Opaque(a.arg)
        for pname, v in zip(names, args, strict=False):
            env[pname] = v
        for k, v in kwargs.items():
            env[k] = v
        for pname in names:
            env.setdefault(pname, Opaque(pname))
        ctx = Ctx(f.mod, env, owner, bound)
        self.depth += 1
        try:
            self.exec_body(f.node.body, ctx)
        except ReturnSignal as r:
            return r.value
        finally:
            self.depth -= 1
        return None

    def exec_body(self, body, ctx):
        for st in body:
            self.exec_stmt(st, ctx)

    def exec_stmt(self, st, ctx):
        if isinstance(st, ast.Expr):
            self.ev(st.value, ctx)
        elif isinstance(st, ast.Assign):
            v = self.ev(st.value, ctx)
            for t in st.targets:
                self.assign(t, v, ctx)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.assign(st.target, self.ev(st.value, ctx), ctx)
        elif isinstance(st, ast.AugAssign):
            cur = self.ev(st.target, ctx)
            rhs = self.ev(st.value, ctx)
            if isinstance(st.op, ast.Add) and isinstance(cur, list):
                if isinstance(rhs, (list, tuple)):
                    cur.extend(rhs)
                else:
                    cur.append(Opaque("augadd"))
            elif isinstance(st.op, ast.Add) and isinstance(cur, str) and isinstance(rhs, str):
                self.assign(st.target, cur + rhs, ctx)
            else:
                self.assign(st.target, Opaque("aug"), ctx)
        elif isinstance(st, ast.Delete):
            for t in st.targets:
                if isinstance(t, ast.Subscript):
                    cont = self.ev(t.value, ctx)
                    key = self.ev(t.slice, ctx)
                    if isinstance(cont, dict) and key in cont:
                        del cont[key]
        elif isinstance(st, ast.If):
            t = self.ev(st.test, ctx)
            if isinstance(t, (bool, int, type(None), str, list, dict)):
                self.exec_body(st.body if t else st.orelse, ctx)
            else:
                # unknown condition: take both branches, ignore returns inside
                for branch in (st.body, st.orelse):
                    with contextlib.suppress(ReturnSignal):
                        self.exec_body(branch, ctx)
        elif isinstance(st, ast.For):
            it = self.ev(st.iter, ctx)
            if isinstance(it, dict):
                it = list(it)
            if isinstance(it, (list, tuple)):
                for item in list(it):
                    self.assign(st.target, item, ctx)
                    self.exec_body(st.body, ctx)
            else:
                self.warn(f"cannot iterate {ast.unparse(st.iter)[:60]}")
        elif isinstance(st, ast.Return):
            raise ReturnSignal(self.ev(st.value, ctx) if st.value else None)
        elif isinstance(st, ast.Try):
            self.exec_body(st.body, ctx)
            self.exec_body(st.orelse, ctx)
            self.exec_body(st.finalbody, ctx)
        elif isinstance(st, ast.With):
            self.exec_body(st.body, ctx)
        elif isinstance(st, ast.ImportFrom):
            target = self.ix._abs(ctx.mod, st)
            for a in st.names:
                if a.name == "*":
                    continue
                nm = a.asname or a.name
                if self.ix.has(f"{target}.{a.name}"):
                    ctx.env[nm] = ModRef(f"{target}.{a.name}")
                elif self.ix.has(target):
                    r = self.ix.resolve(target, a.name)
                    ctx.env[nm] = self.from_resolved(r, a.name) if r else Opaque(a.name)
                elif target in ("argparse", "json"):
                    ctx.env[nm] = self.ext_attr(target, a.name)
                else:
                    ctx.env[nm] = ExtRef(target, a.name)
        elif isinstance(st, ast.Import):
            for a in st.names:
                ctx.env[a.asname or a.name.split(".")[0]] = ModRef(
                    a.name if a.asname else a.name.split(".")[0]
                )
        # FunctionDef, ClassDef, Raise, Pass, Assert, While...: ignored

    # ---- add_argument ------------------------------------------------------
    def record_add_argument(self, n: ast.Call, ctx: Ctx):
        pos = self._seq(n.args, ctx)
        kw: dict = {}
        for k in n.keywords:
            if k.arg is None:
                d = self.ev(k.value, ctx)
                if isinstance(d, dict):
                    kw.update(copy.deepcopy(d))
                else:
                    self.warn(f"cannot expand **{ast.unparse(k.value)[:60]} for {pos}")
            else:
                kw[k.arg] = self.ev(k.value, ctx)
        opts = [p for p in pos if isinstance(p, str) and p.startswith("-")]
        if any(isinstance(p, Opaque) for p in pos):
            self.warn(f"opaque option string in {ast.unparse(n)[:80]}")
        if not opts:
            return
        loc = f"{ctx.mod}:{n.lineno}"
        self.records.append((opts, kw, loc))


# --------------------------------------------------------------------------
# classification of one add_argument call
# --------------------------------------------------------------------------
def classify_type(t, ix: ModuleIndex) -> tuple[str, bool]:
    """argparse ``type=`` value -> (kind, accepts_suffix)."""
    if t is None:
        return "str", False
    if isinstance(t, Sym) and t.cat == "type":
        return {
            "int": ("int", False),
            "float": ("float", False),
            "str": ("str", False),
            "json": ("json", False),
            "hr_int": ("int", True),
            "hr_int_or_auto": ("int", True),
            "bool_type": ("unknown", False),
            "bool": ("unknown", False),
        }.get(t.name, ("unknown", False))
    if isinstance(t, FuncRef):
        if t.name in KNOWN_TYPE_FUNCS:
            return classify_type(Sym("type", KNOWN_TYPE_FUNCS[t.name]), ix)
        ret = t.node.returns
        if ret is not None:
            txt = ast.unparse(ret).replace("Optional[", "").replace(" | None", "")
            base = txt.split("[")[0]
            if base in ("int", "float", "str"):
                return base, False
            if base in ("dict", "Dict"):
                return "json", False
        return "unknown", False
    if isinstance(t, LambdaVal):
        body = t.node.body
        if isinstance(body, (ast.ListComp, ast.DictComp)):
            return "str", False  # comma-separated string ("a,b" / "k:v,k2:v2") split by it
        txt = ast.unparse(body)
        if any(s in txt for s in (".lower()", ".replace(", ".upper()", ".strip(")):
            return "str", False
        if txt.startswith("int("):
            return "int", False
        if txt.startswith("float("):
            return "float", False
        return "unknown", False
    return "unknown", False


def action_name(a) -> str | None:
    if a is None:
        return None
    if isinstance(a, str):
        return a
    if isinstance(a, Sym):
        return a.name
    if isinstance(a, (ClassRef, FuncRef, ExtRef)):
        return a.name
    return "?"


def classify(kw: dict, ix: ModuleIndex) -> dict:
    info: dict = {"negatable": False}
    action = action_name(kw.get("action"))
    nargs = kw.get("nargs")
    t = kw.get("type")
    kind = None
    if action in ("store_true", "store_false", "store_const"):
        kind = "bool"
    elif action == "BooleanOptionalAction":
        kind, info["negatable"] = "bool", True
    elif action == "StoreBoolean":
        kind = "bool"  # ``--x`` or ``--x true/false``
        info["optional_value"] = True
    elif action == "append":
        kind = "list"
        info["repeatable"] = True
    elif action == "count":
        kind = "int"
    if kind is None:
        if nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
            kind = "list"
        else:
            kind, hr = classify_type(t, ix)
            if hr:
                info["accepts_suffix"] = True
            if nargs == "?" and "const" in kw:
                info["optional_value"] = True
    elif kind == "list":
        _, hr = classify_type(t, ix)
    # accepts_suffix may also apply to list elements etc.
    if kind != "bool":
        _, hr = classify_type(t, ix) if t is not None else ("", False)
        if hr:
            info["accepts_suffix"] = True
    info["kind"] = kind
    ch = kw.get("choices")
    if isinstance(ch, (list, tuple)) and ch and concrete(list(ch)):
        vals = [c for c in ch if c is not None and c != "None"]
        if vals and all(isinstance(c, (str, int, float, bool)) for c in vals):
            info["choices"] = list(dict.fromkeys(vals))
    help_ = kw.get("help")
    if kw.get("deprecated") is True or (
        isinstance(help_, str) and help_.lstrip().upper().startswith("[DEPRECATED")
    ):
        info["deprecated"] = True
    if kind == "unknown":
        info["_why"] = kw.get("_why") or f"type={t!r} action={action!r}"
    return info


# --------------------------------------------------------------------------
# per-version driver
# --------------------------------------------------------------------------
def find_serve_entry(ix: ModuleIndex):
    mod = "vllm.entrypoints.cli.serve"
    tree = ix.tree(mod)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.FunctionDef) and st.name == "subparser_init":
                    c = ClassRef(mod, node)
                    return FuncRef(mod, st, owner=c, bound=c, kind="method")
    return None


def find_scripts_serve(ix: ModuleIndex) -> tuple[str, list[ast.stmt]] | None:
    """The ``serve`` part of ``vllm/scripts.py``'s ``main()`` (0.6.0-0.7.2, before ``cli/``).

    ``main`` also builds the top-level parser (``-v/--version`` since 0.6.6) and the
    ``complete``/``chat`` sub-commands, none of which are ``vllm serve`` options: only the
    statements after ``<name> = subparsers.add_parser("serve", ...)`` that mention ``<name>``
    are returned, to be run with ``<name>`` bound to the parser.
    """
    tree = ix.tree("vllm.scripts")
    body = tree.body if tree is not None else []
    main = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    if main is None:
        return None
    for i, st in enumerate(main.body):
        call = st.value if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_parser"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and call.args[0].value == "serve"
            and isinstance(st.targets[0], ast.Name)
        ):
            name = st.targets[0].id
            uses = [
                s
                for s in main.body[i + 1 :]
                if any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(s))
            ]
            return name, uses
    return None


def has_O_shorthand(ix: ModuleIndex) -> bool:
    for mod in ("vllm.utils.argparse_utils", "vllm.utils", "vllm.utils.__init__"):
        src = ix.source(mod)
        if 'startswith("-O")' in src or "startswith('-O')" in src:
            return True
    return False


def extract_version(root: Path, verbose=False) -> dict:
    ix = ModuleIndex(root)
    it = Interp(ix, verbose)
    entry = find_serve_entry(ix)
    scripts = find_scripts_serve(ix) if entry is None else None
    if entry is not None:
        it.run_function(entry, [Opaque("subparsers")], {})
    elif scripts is not None:
        name, body = scripts
        it.exec_body(body, Ctx("vllm.scripts", {name: PARSER}))
    else:
        raise SystemExit(f"{root}: neither cli/serve.py subparser_init nor scripts.py main")
    flags: dict[str, dict] = {}
    for opts, kw, loc in it.records:
        longs = [o for o in opts if o.startswith("--")]
        canon = longs[0] if longs else opts[0]
        aliases = [o for o in opts if o != canon and o != "-O"]
        info = classify(kw, ix)
        info["aliases"] = aliases
        info["loc"] = loc
        if kw.get("_unresolved"):
            info["_unresolved"] = kw["_unresolved"]
        if canon in flags:
            it.warn(f"{canon} registered twice ({flags[canon]['loc']}, {loc})")
        flags[canon] = info
        if "-O" in opts:
            flags["-O"] = {"kind": "str", "negatable": False, "aliases": [], "loc": loc}
    if "-O" not in flags and has_O_shorthand(ix):
        flags["-O"] = {
            "kind": "str",
            "negatable": False,
            "aliases": [],
            "loc": "FlexibleArgumentParser",
        }
    return {"flags": flags, "warnings": it.warnings, "unresolved": sorted(ix.unresolved)}


def spans_of(present: list[bool], versions: list[str]) -> list[list[str]]:
    spans, start = [], None
    for i, p in enumerate(present):
        if p and start is None:
            start = i
        if not p and start is not None:
            spans.append([versions[start], versions[i - 1]])
            start = None
    if start is not None:
        spans.append([versions[start], versions[-1]])
    return spans


def merge(per_version: dict[str, dict], versions: list[str]) -> dict:
    names = sorted({f for v in versions for f in per_version[v]["flags"]})
    out = {}
    for name in names:
        present = [name in per_version[v]["flags"] for v in versions]
        have = [v for v, p in zip(versions, present, strict=True) if p]
        infos = [per_version[v]["flags"][name] for v in have]
        last = infos[-1]
        entry: dict = {"spans": spans_of(present, versions)}
        aliases: list[str] = []
        for i in infos:
            for a in i["aliases"]:
                if a not in aliases:
                    aliases.append(a)
        entry["aliases"] = sorted(aliases)
        alias_from = {}
        for a in aliases:
            has_a = [a in i["aliases"] for i in infos]
            if not all(has_a):
                alias_from[a] = have[has_a.index(True)]
        if alias_from:
            entry["aliases_from"] = alias_from
        entry["kind"] = last["kind"]
        kinds = [i["kind"] for i in infos]
        if len(set(kinds)) > 1:
            runs = []
            for v, k in zip(have, kinds, strict=True):
                if runs and runs[-1][0] == k:
                    runs[-1][2] = v
                else:
                    runs.append([k, v, v])
            entry["kind_by_version"] = runs
        neg = [i["negatable"] for i in infos]
        entry["negatable"] = any(neg)
        if any(neg) and not all(neg):
            entry["negatable_from"] = have[neg.index(True)]
            if not neg[-1]:
                entry["negatable_until"] = have[len(neg) - 1 - neg[::-1].index(True)]
        if "choices" in last:  # choices of the latest version only
            entry["choices"] = last["choices"]
        suf = [bool(i.get("accepts_suffix")) for i in infos]
        if any(suf):
            entry["accepts_suffix"] = True
            if not all(suf):
                entry["accepts_suffix_from"] = have[suf.index(True)]
        if any(i.get("optional_value") for i in infos):
            entry["optional_value"] = True
        if any(i.get("repeatable") for i in infos):
            entry["repeatable"] = True
        dep = [bool(i.get("deprecated")) for i in infos]
        if dep[-1]:
            k = len(dep) - 1
            while k > 0 and dep[k - 1]:
                k -= 1
            entry["deprecated_from"] = have[k]
        out[name] = entry
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "src",
        nargs="?",
        default=DEFAULT_SRC,
        help="folder with <version>/vllm/... sources (default %(default)s)",
    )
    ap.add_argument(
        "-o", "--output", default=str(DEFAULT_OUT), help="JSON file to write (default %(default)s)"
    )
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="print per-version counts, unknown kinds, warnings, unresolved names to stderr",
    )
    args = ap.parse_args(argv)
    src = Path(args.src)
    versions = sorted(
        (p.name for p in src.iterdir() if p.is_dir() and (p / "vllm").is_dir()), key=version_key
    )
    if not versions:
        raise SystemExit(f"no <version>/vllm folders under {src}")
    per_version = {}
    for v in versions:
        per_version[v] = extract_version(src / v, args.verbose)
        if args.verbose:
            r = per_version[v]
            print(f"{v}: {len(r['flags'])} flags", file=sys.stderr)
            for name, info in sorted(r["flags"].items()):
                if info["kind"] == "unknown":
                    print(f"  unknown kind {name}: {info.get('_why')}", file=sys.stderr)
            for w in r["warnings"]:
                print(f"  warning: {w}", file=sys.stderr)
            if r["unresolved"]:
                print(f"  unresolved names: {', '.join(r['unresolved'])}", file=sys.stderr)
    data = {
        "generated_from": GENERATED_FROM,
        "sampled_versions": versions,
        "flags": merge(per_version, versions),
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(
        f"wrote {len(data['flags'])} flags for {len(versions)} versions to {out}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
