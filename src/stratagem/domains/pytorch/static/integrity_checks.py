"""Owns the integrity static checks over a candidate's Python and its C++/CUDA strings.

Each check takes a `Scan` (see `ast_scan`) and returns hits: (line, message). The rules live in
`integrity_rules`; what is here is matching them, plus the structural checks no name table can
express (assignments into imported modules, state kept between calls, except handlers, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from stratagem.domains.pytorch.static import integrity_rules as R
from stratagem.domains.pytorch.static.ast_scan import (
    TYPE_OF,
    Scan,
    attr_name,
    attr_receiver,
    is_getattr_call,
    is_self,
    literal_str,
)
from stratagem.domains.pytorch.static.integrity_rules import first_match

Hit = tuple[int | None, str]


class Hits:
    """Findings of one check: deduplicated, each message ending in the check's reason."""

    def __init__(self, why: str) -> None:
        self.why = why
        self._seen: set[object] = set()
        self._items: list[Hit] = []

    def add(self, line: int | None, what: str, key: object = None) -> None:
        k = key if key is not None else (line, what)
        if k not in self._seen:
            self._seen.add(k)
            self._items.append((line, f"{what}: {self.why}"))

    def items(self) -> list[Hit]:
        return sorted(self._items, key=lambda h: (h[0] is None, h[0] or 0))


def describe(scan: Scan, node: ast.AST, name: str) -> str:
    seg = scan.segment(node)
    return f"`{name}`" if not seg or seg == name else f"`{name}` (written `{seg}`)"


def apply_rules(scan: Scan, rules: R.Rules) -> Hits:
    """Match a rule table: imports, resolved references, attribute names, native strings."""
    hits = Hits(rules.why)
    if rules.names:
        for stmt, path in scan.aliases.imports:
            if first_match({path}, rules.names):
                hits.add(stmt.lineno, f"import of `{path}`")
        for node, names in scan.refs:
            m = first_match(names, rules.names)
            if m:
                hits.add(getattr(node, "lineno", None), describe(scan, node, m[0]))
    if rules.attrs:
        for node in scan.nodes:
            a = attr_name(node)
            if a not in rules.attrs or (isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load)):
                continue
            if rules.attrs_on_self or not is_self(attr_receiver(node)):
                hits.add(node.lineno, f"`.{a}` in Python code")  # type: ignore[attr-defined]
    scan_native(scan, rules, hits)
    return hits


_ALTERNATION: dict[tuple[str, ...], re.Pattern[str]] = {}


def _alternation(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    rx = _ALTERNATION.get(patterns)
    if rx is None:
        rx = _ALTERNATION[patterns] = re.compile("|".join(f"(?:{p})" for p in patterns))
    return rx


def scan_native(scan: Scan, rules: R.Rules, hits: Hits) -> None:
    native_rx = _alternation((*rules.code, *rules.text))
    text_rx = _alternation(rules.text)
    for st in scan.strings:
        rx = native_rx if st.native else text_rx
        if rx is None:
            continue
        where = "C++/CUDA source" if st.native else "a string"
        for m in rx.finditer(st.code):
            token = " ".join(m.group(0).split())
            hits.add(st.line + st.code.count("\n", 0, m.start()), f"`{token}` in {where}",
                     key=("native", token))


def _parents_of(scan: Scan, node: ast.AST) -> Iterator[ast.AST]:
    p = scan.parents.get(node)
    while p is not None:
        yield p
        p = scan.parents.get(p)


def enclosing_function(scan: Scan, node: ast.AST) -> ast.AST | None:
    for p in _parents_of(scan, node):
        if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return p
    return None


# -- reference_access ------------------------------------------------------------------------


def _defined_at_top(scan: Scan) -> set[str]:
    """Names the candidate file defines itself at module level (def, class, assignment)."""
    out: set[str] = set()
    for node in scan.tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def reference_access(scan: Scan) -> list[Hit]:
    """The reference's names (`Model`, `get_inputs`, `get_init_inputs`) may appear only as the
    candidate's own: a KernelBench-format candidate file that defines them (and size
    constants) is judged by its `ModelNew` alone (the harness never calls the candidate's
    copies); imported, or used without a definition of its own, they reach for the problem."""
    hits = apply_rules(scan, R.REFERENCE_ACCESS)
    own = _defined_at_top(scan)
    for node in scan.nodes:
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.Attribute) or is_getattr_call(node):
            name = attr_name(node)
        elif isinstance(node, ast.alias):
            name = node.asname if node.asname in R.REFERENCE_NAMES else node.name
            if name in R.REFERENCE_NAMES:
                hits.add(_line_of_alias(scan, node), f"`{name}` imported (it belongs to the problem file)")
            continue
        if name in R.REFERENCE_NAMES and name not in own:
            hits.add(getattr(node, "lineno", None),
                     f"`{name}` used without a definition of its own (it belongs to the problem file)")
        if isinstance(node, ast.ImportFrom) and node.level:
            hits.add(node.lineno, f"relative import `{'.' * node.level}{node.module or ''}`")
    return hits.items()


def _line_of_alias(scan: Scan, node: ast.AST) -> int | None:
    return next((getattr(p, "lineno", None) for p in _parents_of(scan, node)), None)


# -- dynamic_code ----------------------------------------------------------------------------


def dynamic_code(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.DYNAMIC_CODE)
    q = scan.aliases.qualnames
    for node in scan.nodes:
        if isinstance(node, ast.Call):
            fn = q(node.func)
            dyn = fn & {"builtins.getattr", "builtins.setattr", "builtins.delattr"}
            if dyn and len(node.args) >= 2 and literal_str(node.args[1]) is None and not is_self(node.args[0]):
                hits.add(node.lineno, f"`{min(dyn)[9:]}` with a computed attribute name")
            if "builtins.type" in fn and len(node.args) == 3:
                hits.add(node.lineno, "`type(name, bases, dict)` creates a class dynamically")
        elif isinstance(node, ast.Attribute) and node.attr == "__dict__" and not is_self(node.value):
            hits.add(node.lineno, f"`{scan.segment(node)}`")
    if scan.too_large:
        hits.add(None, "the strings this file builds are too large to check (over 4 MiB once "
                 "folded)")
    attr_fns = {"builtins.getattr", "builtins.setattr", "builtins.delattr"}
    for node, names in _uncalled(scan, attr_fns):
        hits.add(getattr(node, "lineno", 0), f"`{min(names)[9:]}` passed as a value")
    return hits.items()


# -- monkey_patch ----------------------------------------------------------------------------

_SETATTRS = {"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
             "builtins.object.__delattr__", "builtins.type.__setattr__", "builtins.type.__delattr__"}


def _owned_by_flags(names: set[str]) -> bool:
    return bool(first_match(names, (*R.FLAG_STORES, "os.environ")))


def monkey_patch(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.MONKEY_PATCH)
    q = scan.aliases.qualnames
    for stmt, target in scan.stores:
        if not isinstance(target, ast.Attribute | ast.Subscript):
            continue
        names = q(target.value)
        verb = "deleting" if isinstance(stmt, ast.Delete) else "assigning"
        if names and not _owned_by_flags(names | q(target)):
            hits.add(target.lineno, f"{verb} `{scan.segment(target)}` modifies `{_shown(names)}`")
        elif isinstance(target, ast.Attribute) and _dunder(target.attr) and not is_self(target.value):
            hits.add(target.lineno, f"{verb} `{scan.segment(target)}` rebinds a special method")
    for node in scan.nodes:
        if isinstance(node, ast.Call):
            _monkey_call(scan, node, hits)
    for node, names in _uncalled(scan, _SETATTRS):
        hits.add(getattr(node, "lineno", 0), f"`{min(names)[9:]}` passed as a value: what it modifies cannot be checked")
    return hits.items()


def _uncalled(scan: Scan, wanted: set[str]) -> Iterator[tuple[ast.AST, set[str]]]:
    """References to `wanted` functions other than as the callee of a call (`map(setattr, ...)`)."""
    for node, names in scan.refs:
        hit = names & wanted
        parent = scan.parents.get(node)
        if hit and not (isinstance(parent, ast.Call) and parent.func is node):
            yield node, hit


_NAMESPACES = ("**.__dict__", "sys.modules", "sys.path", "sys.meta_path", "sys.path_hooks", "builtins$")
"""Namespaces whose mutating methods (update, setdefault, ...) rebind what imports see."""


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _shown(names: set[str]) -> str:
    return "the class of an object" if names == {TYPE_OF} else min(names - {TYPE_OF} or names)


def _monkey_call(scan: Scan, node: ast.Call, hits: Hits) -> None:
    q = scan.aliases.qualnames
    fn = q(node.func)
    obj: ast.AST | None = node.args[0] if fn & _SETATTRS and node.args else None
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in ("__setattr__", "__delattr__"):
        obj = f.value if obj is None else obj
    if obj is not None and q(obj):
        hits.add(node.lineno, f"`{scan.segment(node)}` modifies `{_shown(q(obj))}`")
    elif obj is not None and len(node.args) > 1 and _dunder(literal_str(node.args[1]) or "") and not is_self(obj):
        hits.add(node.lineno, f"`{scan.segment(node)}` rebinds a special method")
    if isinstance(f, ast.Attribute) and f.attr in R.MUTATORS:
        names = q(f.value)  # vars(torch).update(...), torch.__dict__.setdefault(...)
        if first_match(names, _NAMESPACES):
            hits.add(node.lineno, f"`{scan.segment(node)}` modifies `{_shown(names)}`")
    if first_match(fn, ("torch.library",)) and _names_aten(node):
        hits.add(node.lineno, f"`{scan.segment(node)}` overrides a built-in torch operator")


def _names_aten(call: ast.Call) -> bool:
    for a in [*call.args, *(k.value for k in call.keywords)]:
        s = literal_str(a)
        if s is not None and re.match(r"(?:aten|prim|prims)(?:::|$|\.)", s):
            return True
    return False


# -- rule-only checks ------------------------------------------------------------------------


def threads(scan: Scan) -> list[Hit]:
    return apply_rules(scan, R.THREADS).items()


def streams(scan: Scan) -> list[Hit]:
    return apply_rules(scan, R.STREAMS).items()


def process_exit(scan: Scan) -> list[Hit]:
    return apply_rules(scan, R.PROCESS_EXIT).items()


# -- fake_tensor -----------------------------------------------------------------------------


def fake_tensor(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.FAKE_TENSOR)
    q = scan.aliases.qualnames
    for node in scan.nodes:
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                m = first_match(q(b), R.TENSOR_BASES)
                if m:
                    hits.add(node.lineno, f"`class {node.name}` subclasses `{m[0]}`")
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in R.FAKE_METHODS:
                    hits.add(item.lineno, f"`{node.name}` defines `{item.name}`")
    for _, target in scan.stores:
        if isinstance(target, ast.Attribute) and target.attr == "__class__":
            hits.add(target.lineno, f"assigning `{scan.segment(target)}`")
    return hits.items()


# -- io --------------------------------------------------------------------------------------


def io(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.IO)
    for path in R.IO_PATHS:
        for m in re.finditer(re.escape(path), scan.source):
            hits.add(scan.source.count("\n", 0, m.start()) + 1, f"the path `{path}`", key=("path", path))
        for st in scan.strings:
            if path in st.text:
                hits.add(st.line, f"the path `{path}`", key=("path", path))
    return hits.items()


# -- global_flags ----------------------------------------------------------------------------

_ENV_WRITERS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


def global_flags(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.GLOBAL_FLAGS)
    q = scan.aliases.qualnames
    for _, target in scan.stores:
        if isinstance(target, ast.Subscript) and "os.environ" in q(target.value):
            if literal_str(target.slice) not in R.ENV_ALLOWED:
                hits.add(target.lineno, f"setting `{scan.segment(target)}`")
        elif isinstance(target, ast.Attribute):
            m = first_match(q(target), (*R.FLAG_STORES, "os.environ$"))
            if m:
                hits.add(target.lineno, f"setting `{m[0]}`")
    for node in scan.nodes:
        if not isinstance(node, ast.Call):
            continue
        if _changes_environ(scan, node):
            hits.add(node.lineno, f"`{scan.segment(node)}` changes the environment")
        m = first_match(q(node.func), R.GRAD_SWITCHES)
        if m and not isinstance(scan.parents.get(node), ast.withitem):
            hits.add(node.lineno, f"`{m[0]}(...)` outside a `with` statement")
    return hits.items()


def _changes_environ(scan: Scan, call: ast.Call) -> bool:
    """A call of an `os.environ` method that writes it, other than to set or drop an allowed key."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in _ENV_WRITERS and "os.environ" in scan.aliases.qualnames(f.value)):
        return False
    key = literal_str(call.args[0]) if call.args else None
    return not (f.attr in ("setdefault", "pop", "__setitem__") and key in R.ENV_ALLOWED)


# -- exception_fallback ----------------------------------------------------------------------


def exception_fallback(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.EXCEPTION_FALLBACK)
    for node in scan.nodes:
        if isinstance(node, ast.ExceptHandler):
            caught = scan.segment(node.type) if node.type is not None else ""
            hits.add(node.lineno, f"`except {caught}`" if caught else "`except:`")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ("__exit__", "__aexit__"):
            for r in ast.walk(node):
                if isinstance(r, ast.Return) and r.value is not None and not (
                    isinstance(r.value, ast.Constant) and r.value.value in (None, False)
                ):
                    hits.add(r.lineno, f"`{node.name}` that may suppress exceptions")
    return hits.items()


# -- precision (warn) ------------------------------------------------------------------------


def precision(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.PRECISION)
    for node in scan.nodes:
        if not isinstance(node, ast.Call):
            continue
        for k in node.keywords:
            v = k.value.value if isinstance(k.value, ast.Constant) else None
            if (k.arg == "allow_tf32" and v is True) or (
                k.arg == "input_precision" and isinstance(v, str) and v.startswith("tf32")
            ):
                hits.add(node.lineno, f"`{k.arg}={v!r}`")
    return hits.items()
