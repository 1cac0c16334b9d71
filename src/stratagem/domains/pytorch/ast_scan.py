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

from stratagem.domains.pytorch.native_scan import clean

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


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain rooted in a Name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def literal_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


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


def _param_defaults(args: ast.arguments) -> Iterator[tuple[str, ast.AST]]:
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
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    pairs.extend(_target_pairs(t, node.value))
                    if isinstance(t, ast.Name) and isinstance(node.value, ast.Lambda):
                        pairs.append((f"{t.id}()", node.value.body))
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                pairs.extend(_target_pairs(node.target, node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                if isinstance(node.iter, ast.Tuple | ast.List | ast.Set):
                    for e in node.iter.elts:
                        pairs.extend((k, e) for k, _ in _target_pairs(node.target, e))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                pairs.extend(_param_defaults(node.args))
                self.shadowed.update(_params(node.args))
                pairs.extend(_returns(node))
            elif isinstance(node, ast.ClassDef):  # class attributes: `H.t` where `class H: t = time`
                pairs.extend(
                    (f"{node.name}.{k}", v) for st in node.body if isinstance(st, ast.Assign)
                    for t in st.targets for k, v in _target_pairs(t, st.value) if "." not in k
                )
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
        for _ in range(25):
            changed = False
            for key, value in pairs:
                new = self.qualnames(value) - self.bindings.get(key, set())
                if new:
                    self.bindings[key] |= new
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

    def qualname(self, node: ast.AST) -> str | None:
        """One canonical name for `node` (the first in sorted order), or None."""
        names = self.qualnames(node)
        return min(names) if names else None

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


def parent_map(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def docstring_nodes(tree: ast.Module) -> set[ast.AST]:
    """String constants that are bare expression statements (docstrings and the like)."""
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant | ast.JoinedStr)
    }


def is_str_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod | ast.Mult):
        return is_str_expr(node.left) or is_str_expr(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("join", "format", "replace") and is_str_expr(node.func.value)
    return False


class StringFolder:
    """Best-effort value of string expressions (concatenation, f-strings, join/format/replace,
    names assigned strings anywhere in the file); unknown parts fold to ""."""

    def __init__(self, tree: ast.Module) -> None:
        self.env: dict[str, list[ast.AST]] = defaultdict(list)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and _stringish(node.value):
                        self.env[t.id].append(node.value)

    def fold(self, node: ast.AST | None, depth: int = 0) -> str:
        if node is None or depth > 12:
            return ""
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else ""
        if isinstance(node, ast.JoinedStr):
            return "".join(self.fold(v, d) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.fold(node.value, d)
        if isinstance(node, ast.BinOp):
            left = self.fold(node.left, d)
            if isinstance(node.op, ast.Mult):
                return left
            if isinstance(node.op, ast.Mod) and not _WIDE_PERCENT.search(left):
                r = node.right
                args = tuple(self.fold(e, d) for e in r.elts) if isinstance(r, ast.Tuple) else (self.fold(r, d),)
                try:
                    return left % args
                except (TypeError, ValueError, KeyError):
                    pass
            return left + self.fold(node.right, d)
        if isinstance(node, ast.Name):
            return "\n".join(self.fold(v, d) for v in self.env.get(node.id, ()))
        if isinstance(node, ast.List | ast.Tuple):
            return "\n".join(self.fold(e, d) for e in node.elts)
        if isinstance(node, ast.IfExp):
            return self.fold(node.body, d) + "\n" + self.fold(node.orelse, d)
        if isinstance(node, ast.Call):
            return self._call(node, d)
        return ""

    def _call(self, node: ast.Call, d: int) -> str:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "str" and node.args:
            return self.fold(node.args[0], d)
        if not isinstance(f, ast.Attribute):
            return ""
        base = self.fold(f.value, d)
        args = [self.fold(a, d) for a in node.args]
        if f.attr == "join" and node.args:
            a0 = node.args[0]
            items = [self.fold(e, d) for e in a0.elts] if isinstance(a0, ast.List | ast.Tuple) else [args[0]]
            return base.join(items)
        if f.attr == "replace" and len(args) >= 2 and all(literal_str(a) is not None for a in node.args[:2]):
            return base.replace(args[0], args[1])
        if f.attr == "format":
            if "{" in base and not re.search(r"\{[^{}]*[:!]", base):  # no format specs: no blow-up
                kwargs = {k.arg: self.fold(k.value, d) for k in node.keywords if k.arg}
                try:
                    return base.format(*args, **kwargs)
                except (IndexError, KeyError, ValueError, AttributeError):
                    pass
            return base + "".join(args)
        return base

    def fold_list(self, node: ast.AST | None) -> list[str]:
        """Literal string items of a list/tuple (or one string), following names."""
        if node is None:
            return []
        if isinstance(node, ast.Name):
            return [s for v in self.env.get(node.id, ()) for s in self.fold_list(v)]
        if isinstance(node, ast.List | ast.Tuple):
            return [s for e in node.elts for s in self.fold_list(e)]
        s = literal_str(node)
        return [s] if s is not None else []


_WIDE_PERCENT = re.compile(r"%[-+ #0]*(?:\*|\d)")


def _stringish(node: ast.AST) -> bool:
    if is_str_expr(node):
        return True
    return isinstance(node, ast.List | ast.Tuple) and any(is_str_expr(e) for e in node.elts)


LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
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

    def __post_init__(self) -> None:
        self.aliases = Aliases(self.tree)
        self.parents = parent_map(self.tree)
        self.folder = StringFolder(self.tree)
        self.extension_calls = [
            n for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and self.resolves(n.func, "torch.utils.cpp_extension.load*")
        ]
        self.strings = self._strings()
        self.refs = list(self._maximal_refs())

    def resolves(self, node: ast.AST, pattern: str) -> bool:
        rx = glob_regex(pattern)
        return any(rx.fullmatch(q) for q in self.aliases.qualnames(node))

    def _strings(self) -> list[StringText]:
        docs = docstring_nodes(self.tree)
        out: list[StringText] = []
        compound: list[StringText] = []
        for node in ast.walk(self.tree):
            if node in docs:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(StringText(node.value, node.lineno, bool(_NATIVE_HINT.search(node.value))))
            elif is_str_expr(node) and not is_str_expr(self.parents.get(node, ast.Pass())):
                text = self.folder.fold(node)
                compound.append(StringText(text, node.lineno, bool(_NATIVE_HINT.search(text))))
        for call in self.extension_calls:
            for kw in call.keywords:
                if kw.arg in NATIVE_KEYWORDS:
                    out.append(StringText(self.folder.fold(kw.value), kw.value.lineno, True))
            for a in call.args[1:3]:
                out.append(StringText(self.folder.fold(a), a.lineno, True))
        return out + compound

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
        text = ast.get_source_segment(self.source, node) or ""
        return " ".join(text.split())[:80]


_GLOB_CACHE: dict[str, re.Pattern[str]] = {}


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Dotted-name pattern: `*` is part of one component, `**` any run of components, a
    trailing `$` means exact; otherwise anything below the name matches too."""
    rx = _GLOB_CACHE.get(pattern)
    if rx is None:
        exact = pattern.endswith("$")
        body = re.escape(pattern.rstrip("$")).replace(r"\*\*", ".*").replace(r"\*", r"[^.]*")
        rx = re.compile(body if exact else body + r"(?:\..*)?")
        _GLOB_CACHE[pattern] = rx
    return rx


def first_match(names: set[str], patterns: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, pattern) for the first pattern any of `names` matches."""
    for p in patterns:
        rx = glob_regex(p)
        for n in sorted(names):
            if rx.fullmatch(n):
                return n, p
    return None
