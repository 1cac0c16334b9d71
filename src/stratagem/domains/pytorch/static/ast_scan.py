"""Owns syntax-only scanning of a candidate's Python: alias resolution, references, strings.

Nothing here imports or runs the candidate (or torch). `Aliases` maps every name a candidate
binds to the canonical dotted path it stands for, so that `import torch.cuda as c; c.Stream()`,
`from torch.cuda import Stream as S`, `x = torch.cuda`, `getattr(torch, "cuda")` and
`importlib.import_module("threading")` all resolve to the names the rules are written in.
`Scan` bundles what every static check needs, computed once per candidate.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from stratagem.core.pysyntax import dotted  # noqa: F401 - part of this module's interface
from stratagem.domains.pytorch.static.integrity_rules import glob_regex
from stratagem.domains.pytorch.static.native_scan import clean
from stratagem.domains.pytorch.static.string_fold import StringFolder, is_str_expr, literal_str

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__builtins__"}

TYPE_OF = "builtins.type(...)"
"""What `type(x)` / `x.__class__` resolve to: some class the candidate did not define (a torch
class, when x is a tensor), so assigning into it is monkey-patching."""

REEXPORTED_MODULES = frozenset(
    "sys os time threading _thread gc inspect builtins subprocess importlib ctypes pickle marshal "
    "socket atexit shutil tempfile pathlib mmap multiprocessing".split()
)
"""Modules other modules re-export (`os.sys`, `torch.sys`): `x.sys.modules` also means `sys.modules`."""

_SHADOWING = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MAX_ROUNDS = 12
_MAX_NAMES = 32
"""Bounds on alias resolution, so that no candidate can make the parent's scan slow."""


def is_getattr_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "delattr", "hasattr")
        and len(node.args) >= 2
    )


def attr_name(node: ast.AST) -> str | None:
    """The attribute a node reads: `x.attr`, or `getattr(x, "attr")` with a literal name."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if is_getattr_call(node) and node.func.id == "getattr":  # type: ignore[attr-defined]
        return literal_str(node.args[1])  # type: ignore[attr-defined]
    return None


def attr_receiver(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Attribute):
        return node.value
    if is_getattr_call(node):
        return node.args[0]  # type: ignore[attr-defined]
    return None


def is_self(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _target_pairs(target: ast.AST, value: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
        if len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                yield from _target_pairs(t, v)
        return
    key = dotted(target)
    if key is not None:
        yield key, value


def param_defaults(args: ast.arguments) -> Iterator[tuple[str, ast.AST]]:
    pos = [*args.posonlyargs, *args.args]
    for a, d in zip(pos[len(pos) - len(args.defaults):], args.defaults, strict=True):
        yield a.arg, d
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if d is not None:
            yield a.arg, d


def _returns(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> Iterator[tuple[str, ast.AST]]:
    """(`f()`, value) for what a function returns, so `f().x = ...` resolves like `value.x`."""
    if isinstance(fn, ast.Lambda):
        return  # a lambda's name comes from its assignment (see Aliases.__init__)
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            yield f"{fn.name}()", node.value


def _params(args: ast.arguments) -> Iterator[str]:
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        yield a.arg
    for a in (args.vararg, args.kwarg):
        if a is not None:
            yield a.arg


def _bound_pairs(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(name, value) for what `node` binds: assignments, a loop over a literal, a function's
    defaults and returns, class attributes."""
    if isinstance(node, ast.Assign):
        for t in node.targets:
            yield from _target_pairs(t, node.value)
            if isinstance(t, ast.Name) and isinstance(node.value, ast.Lambda):
                yield f"{t.id}()", node.value.body
    elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        yield from _target_pairs(node.target, node.value)
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        if isinstance(node.iter, ast.Tuple | ast.List | ast.Set):
            for e in node.iter.elts:
                yield from ((k, e) for k, _ in _target_pairs(node.target, e))
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        yield from param_defaults(node.args)
        yield from _returns(node)
    elif isinstance(node, ast.ClassDef):  # class attributes: `H.t` where `class H: t = time`
        yield from ((f"{node.name}.{k}", v) for st in node.body if isinstance(st, ast.Assign)
                    for t in st.targets for k, v in _target_pairs(t, st.value) if "." not in k)


class Aliases:
    """Canonical dotted names for the names a module binds (scope-insensitive, conservative).

    Every binding anywhere in the file counts, so a name bound to two things resolves to both:
    the checks see every possibility, and an alias cannot hide in another scope.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.bindings: dict[str, set[str]] = defaultdict(set)
        self.imports: list[tuple[ast.stmt, str]] = []
        """Every imported path, with its import statement (`from a import b` gives `a.b`)."""
        self.shadowed: set[str] = set()
        """Names bound by something other than an import or a resolvable assignment."""
        self.star_modules = []
        pairs: list[tuple[str, ast.AST]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                self._add_import(node)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                self.shadowed.update(_params(node.args))
            pairs.extend(_bound_pairs(node))
            self._note_shadowing(node)
        self._resolve(pairs)

    star_modules: list[str]

    def _add_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                self.imports.append((node, a.name))
                if a.asname:
                    self.bindings[a.asname].add(a.name)
                else:
                    root = a.name.split(".")[0]
                    self.bindings[root].add(root)
            return
        mod = "." * node.level + (node.module or "")
        for a in node.names:
            path = f"{mod}.{a.name}" if node.module else f"{mod}{a.name}"
            self.imports.append((node, path))
            if a.name == "*":
                self.star_modules.append(mod)
            else:
                self.bindings[a.asname or a.name].add(path)

    def _note_shadowing(self, node: ast.AST) -> None:
        """Bindings that make a same-named builtin mean something else."""
        if isinstance(node, _SHADOWING):
            self.shadowed.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.shadowed.add(node.name)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension | ast.withitem):
            tgt = node.optional_vars if isinstance(node, ast.withitem) else node.target
            for n in ast.walk(tgt) if tgt is not None else ():
                if isinstance(n, ast.Name):
                    self.shadowed.add(n.id)

    def _resolve(self, pairs: list[tuple[str, ast.AST]]) -> None:
        for _ in range(_MAX_ROUNDS):
            changed = False
            for key, value in pairs:
                have = self.bindings.get(key, set())
                if len(have) >= _MAX_NAMES:  # `x = x.a; x = x.b` must not blow up
                    continue
                new = self.qualnames(value) - have
                if new:
                    self.bindings[key] = have | set(sorted(new)[: _MAX_NAMES - len(have)])
                    changed = True
            if not changed:
                break
        # a name also assigned a value that names nothing (`id = tl.program_id(0)`) is a local
        # variable, not the builtin of the same name
        for key, value in pairs:
            if "." not in key and not self.qualnames(value):
                self.shadowed.add(key)

    def qualnames(self, node: ast.AST) -> set[str]:
        """Every canonical dotted name `node` may stand for (empty when it stands for none)."""
        if isinstance(node, ast.Name):
            out = set(self.bindings.get(node.id, ()))
            if node.id == "__builtins__":
                out.add("builtins")
            elif node.id in BUILTIN_NAMES and node.id not in self.shadowed:
                out.add(f"builtins.{node.id}")
            elif not out and node.id not in self.shadowed:  # maybe from `from m import *`
                out.update(f"{m}.{node.id}" for m in self.star_modules)
            return out
        if isinstance(node, ast.NamedExpr):
            return self.qualnames(node.value)
        if isinstance(node, ast.Attribute):
            return self._attribute(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        return set()

    def _attribute(self, node: ast.Attribute) -> set[str]:
        key = dotted(node)
        if key is not None:
            parts = key.split(".")
            for i in range(len(parts), 1, -1):  # `self.t.x` where `self.t = time`
                hit = self.bindings.get(".".join(parts[:i]))
                if hit:
                    rest = ".".join(parts[i:])
                    return {f"{b}.{rest}" if rest else b for b in hit}
        if node.attr == "__class__" and not is_self(node.value):
            return {TYPE_OF}
        base = self.qualnames(node.value)
        out = {f"{b}.{node.attr}" for b in base}
        if base and node.attr in REEXPORTED_MODULES:
            out.add(node.attr)
        return out

    def _call(self, node: ast.Call) -> set[str]:
        func = self.qualnames(node.func)
        if "builtins.getattr" in func and len(node.args) >= 2:
            name = literal_str(node.args[1])
            return {f"{b}.{name}" for b in self.qualnames(node.args[0])} if name else set()
        if func & {"builtins.__import__", "importlib.import_module", "importlib.__import__"}:
            name = literal_str(node.args[0]) if node.args else None
            return {name} if name else set()
        if "builtins.type" in func and len(node.args) == 1 and not is_self(node.args[0]):
            return {TYPE_OF}
        if "builtins.vars" in func and node.args:  # vars(torch) is torch's namespace
            return {f"{b}.__dict__" for b in self.qualnames(node.args[0])}
        if isinstance(node.func, ast.Name):  # what a candidate function returns
            return set(self.bindings.get(f"{node.func.id}()", ()))
        return set()

    def _subscript(self, node: ast.Subscript) -> set[str]:
        key = literal_str(node.slice)
        if key is None:
            return set()
        base = self.qualnames(node.value)
        out = {key for b in base if b == "sys.modules"}
        return out | {f"{b[: -len('.__dict__')]}.{key}" for b in base if b.endswith(".__dict__")}


def store_targets(tree: ast.AST) -> Iterator[tuple[ast.stmt, ast.expr]]:
    """(statement, target) for every assignment, augmented assignment and del."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for e in ast.walk(t):
                    if isinstance(e, ast.Attribute | ast.Subscript | ast.Name) and not isinstance(e.ctx, ast.Load):
                        yield node, e
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            yield node, node.target
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                yield node, t


def _is_main_test(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (no else): dead when the harness imports the candidate."""
    t = node.test if isinstance(node, ast.If) and not node.orelse else None
    return (
        isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
        and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and literal_str(t.comparators[0]) == "__main__"
    )


def without_main_block(tree: ast.Module) -> ast.Module:
    """The module without its top-level `if __name__ == "__main__":` blocks, which never run when
    the candidate is imported (kept when anything rebinds `__name__`, which could revive them)."""
    if not any(_is_main_test(s) for s in tree.body):
        return tree
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load):
            return tree
        if isinstance(n, ast.alias) and (n.asname or n.name) == "__name__":
            return tree
    return ast.Module(body=[s for s in tree.body if not _is_main_test(s)], type_ignores=tree.type_ignores)


def parent_map(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def docstring_nodes(tree: ast.Module) -> set[ast.AST]:
    """String constants that are bare expression statements (docstrings and the like)."""
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant | ast.JoinedStr)
    }


_MAX_BUILT = 1 << 22
"""The most text (4 MiB) all built strings together may fold to; beyond it the candidate is
rejected (dynamic_code) rather than scanned partly."""


NATIVE_KEYWORDS = ("cpp_sources", "cuda_sources")


@dataclass
class StringText:
    """A string the candidate's code holds, with where it starts."""

    text: str
    line: int
    native: bool
    """Passed to load_inline, or looks like C++/CUDA source."""
    code: str = ""
    """`text` with comments and literal contents blanked when native, else `text` itself."""

    def __post_init__(self) -> None:
        self.code = clean(self.text) if self.native else self.text


_NATIVE_HINT = re.compile(
    r"#\s*include|#\s*define|__global__|__device__|PYBIND11_MODULE|<<<|\b(?:torch|at|c10|std)::"
    r"|\bextern\s+\"C\"|\{[^{}]*;[^{}]*\}"
    r"|\b(?:void|int|float|double|auto|bool|char|long|size_t|int64_t)\s*\**\s+\**\w+\s*[(=;\[]"
)


@dataclass
class Scan:
    """Everything the checks share about one candidate, computed once."""

    tree: ast.Module
    source: str
    aliases: Aliases = field(init=False)
    parents: dict[ast.AST, ast.AST] = field(init=False)
    folder: StringFolder = field(init=False)
    strings: list[StringText] = field(init=False)
    extension_calls: list[ast.Call] = field(init=False)
    refs: list[tuple[ast.AST, set[str]]] = field(init=False)
    """Every outermost reference that resolves, with its canonical names."""
    too_large: bool = field(init=False, default=False)
    """The strings the candidate builds exceed what the scan checks (`_MAX_BUILT`)."""
    nodes: list[ast.AST] = field(init=False)
    """Every node of the tree (`ast.walk` order), walked once."""
    stores: list[tuple[ast.stmt, ast.expr]] = field(init=False)
    """`store_targets` of the tree."""

    def __post_init__(self) -> None:
        self.tree = without_main_block(self.tree)
        self._lines = self.source.encode("utf-8").split(b"\n")
        self.nodes = list(ast.walk(self.tree))
        self.stores = list(store_targets(self.tree))
        self.aliases = Aliases(self.tree)
        self.parents = parent_map(self.tree)
        self.folder = StringFolder(self.tree)
        self.extension_calls = [
            n for n in self.nodes
            if isinstance(n, ast.Call) and self.resolves(n.func, "torch.utils.cpp_extension.load*")
        ]
        self.strings = self._strings()
        self.refs = list(self._maximal_refs())

    def resolves(self, node: ast.AST, pattern: str) -> bool:
        rx = glob_regex(pattern)
        return any(rx.fullmatch(q) for q in self.aliases.qualnames(node))

    def _strings(self) -> list[StringText]:
        """Every non-docstring string constant, then every folded string expression and
        load_inline source (deduplicated, within a total budget: see `too_large`)."""
        docs = docstring_nodes(self.tree)
        out: list[StringText] = []
        built: list[tuple[ast.AST, bool]] = []
        for call in self.extension_calls:
            built += [(kw.value, True) for kw in call.keywords if kw.arg in NATIVE_KEYWORDS]
            built += [(a, True) for a in call.args[1:3]]
        sources = {c for node, _ in built for c in self.folder.constants_in(node)}
        for node in self.nodes:
            if node in docs:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                native = node in sources or bool(_NATIVE_HINT.search(node.value))
                out.append(StringText(node.value, node.lineno, native))
            elif self._compound(node):
                built.append((node, False))
        seen = {st.text for st in out}
        budget = _MAX_BUILT
        for node, native in built:
            text = self.folder.fold(node)
            if text in seen and not native:
                continue
            budget -= len(text)
            if budget < 0:
                self.too_large = True
                break
            seen.add(text)
            out.append(StringText(text, getattr(node, "lineno", 0), native or bool(_NATIVE_HINT.search(text))))
        return out

    def _compound(self, node: ast.AST) -> bool:
        """An outermost string-building expression (not a plain constant, not a bare name)."""
        names = self.folder.names
        if isinstance(node, ast.Constant | ast.Name) or not is_str_expr(node, names):
            return False
        return not is_str_expr(self.parents.get(node, ast.Pass()), names)

    def _maximal_refs(self) -> Iterator[tuple[ast.AST, set[str]]]:
        """Every outermost Name/Attribute/getattr reference (read), with its canonical names."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                continue
            if not isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
                continue
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            names = self.aliases.qualnames(node)
            if names:
                yield node, names

    def segment(self, node: ast.AST) -> str:
        """The node's source text on one line, shortened (for messages)."""
        try:
            first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
            start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        except AttributeError:
            return ""
        if first < 0 or last is None or end is None or last >= len(self._lines) or last - first > 20:
            return ""
        if first == last:
            raw = self._lines[first][start:end]
        else:
            raw = b" ".join([self._lines[first][start:], *self._lines[first + 1: last], self._lines[last][:end]])
        return " ".join(raw.decode("utf-8", "replace").split())[:80]
