"""Owns the `mutable_state` check: state a candidate could keep between calls to cache outputs.

Python: mutated module- or class-level containers, stores into module-level objects from inside
functions, `global`/`nonlocal` rebinding, mutable default arguments, caching decorators, and
`id()` / `.data_ptr()` / `._version` / storages (see `integrity_rules.MUTABLE_STATE`).
C++/CUDA: non-const `static` / `thread_local` variables and namespace-scope variables that can
hold tensors, pointers or containers. Instance state (`self.x`) is left to the runtime checks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from stratagem.core.pysyntax import bound_names  # noqa: F401 - part of this module's interface
from stratagem.domains.pytorch.static import integrity_rules as R
from stratagem.domains.pytorch.static.ast_scan import Scan, is_self, param_defaults
from stratagem.domains.pytorch.static.integrity_checks import (
    Hit,
    Hits,
    apply_rules,
    enclosing_function,
)
from stratagem.domains.pytorch.static.integrity_rules import first_match
from stratagem.domains.pytorch.static.native_scan import (
    namespace_state,
    static_variables,
    strip_preprocessor,
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_DEFS = (*_FUNCS, ast.ClassDef)


def walk_no_defs(nodes: list[ast.AST] | ast.AST) -> Iterator[ast.AST]:
    """Nodes under `nodes`, not descending into nested function or class bodies."""
    todo = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, _DEFS):  # its decorators run here; its body does not
            todo.extend([] if isinstance(node, ast.Lambda) else node.decorator_list)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _body(fn: ast.AST) -> list[ast.AST]:
    return [fn.body] if isinstance(fn, ast.Lambda) else list(fn.body)  # type: ignore[attr-defined]


def _root(expr: ast.AST) -> ast.AST:
    while isinstance(expr, ast.Attribute | ast.Subscript):
        expr = expr.value
    return expr


def _chain(expr: ast.AST) -> list[ast.AST]:
    out = [expr]
    while isinstance(expr, ast.Attribute | ast.Subscript):
        expr = expr.value
        out.append(expr)
    return out


class _State:
    def __init__(self, scan: Scan) -> None:
        self.scan = scan
        tree = scan.tree
        top = list(walk_no_defs(list(tree.body)))
        self.module_names = bound_names(iter(top)) - {
            (a.asname or a.name).split(".")[0] for n in top if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names
        }
        self.containers = {
            t.id for n in top if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
            and self.mutable(n.value)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)
        }
        changed = True
        while changed:  # `_alias = _CACHE` at module level
            new = {
                t.id for n in top if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                and n.value.id in self.containers for t in n.targets if isinstance(t, ast.Name)
            } - self.containers
            self.containers |= new
            changed = bool(new)
        self.container_attrs = {  # `self.cache = _CACHE`
            t.attr for stmt, t in scan.stores if isinstance(t, ast.Attribute) and is_self(t.value)
            and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in self.containers
        }
        self.class_containers: dict[str, set[str]] = {}
        for cls in (n for n in scan.nodes if isinstance(n, ast.ClassDef)):
            attrs = {
                t.id for n in walk_no_defs(list(cls.body)) if isinstance(n, ast.Assign) and self.mutable(n.value)
                for t in n.targets if isinstance(t, ast.Name)
            }
            if attrs:
                self.class_containers[cls.name] = attrs
        self.instance_attrs = {
            t.attr for _, t in scan.stores if isinstance(t, ast.Attribute) and is_self(t.value)
        }
        self._locals: dict[ast.AST, set[str]] = {}
        self._aliases: dict[ast.AST, set[str]] = {}

    def mutable(self, value: ast.AST) -> bool:
        if isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp):
            return True
        return isinstance(value, ast.Call) and bool(
            first_match(self.scan.aliases.qualnames(value.func), R.CONTAINER_CALLS)
        )

    def locals_of(self, fn: ast.AST) -> set[str]:
        if fn not in self._locals:
            nodes = list(walk_no_defs(_body(fn)))
            declared = {n for s in nodes if isinstance(s, ast.Global | ast.Nonlocal) for n in s.names}
            args = fn.args  # type: ignore[attr-defined]
            params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
            self._locals[fn] = (params | bound_names(iter(nodes))) - declared
        return self._locals[fn]

    def container_aliases(self, fn: ast.AST) -> set[str]:
        """Local names bound straight to a module-level container (`c = _CACHE`, `c=_CACHE`)."""
        if fn not in self._aliases:
            self._aliases[fn] = self._container_aliases(fn)
        return self._aliases[fn]

    def _container_aliases(self, fn: ast.AST) -> set[str]:
        out = {
            t.id for n in walk_no_defs(_body(fn)) if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Name) and n.value.id in self.containers
            for t in n.targets if isinstance(t, ast.Name)
        }
        pairs = param_defaults(fn.args)  # type: ignore[attr-defined]
        return out | {p for p, d in pairs if isinstance(d, ast.Name) and d.id in self.containers}


def _mutations(scan: Scan) -> Iterator[tuple[ast.AST, ast.AST, bool]]:
    """(node, expression being mutated, is_store) for stores, dels and mutating method calls."""
    for _, target in scan.stores:
        if isinstance(target, ast.Attribute | ast.Subscript):
            yield target, target.value, True
    for node in scan.nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in R.MUTATORS:
            yield node, node.func.value, False
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            yield node, node.target, False


def mutable_state(scan: Scan) -> list[Hit]:
    hits = apply_rules(scan, R.MUTABLE_STATE)
    st = _State(scan)
    for node, expr, is_store in _mutations(scan):
        what = _mutation(st, node, expr, is_store)
        if what:
            hits.add(node.lineno, what)  # type: ignore[attr-defined]
    _rebinding(st, hits)
    _mutable_defaults(st, hits)
    _calls(st, hits)
    _native(scan, hits)
    return hits.items()


class _Lazy:
    """A node's source segment, computed only when a message needs it."""

    def __init__(self, scan: Scan, node: ast.AST) -> None:
        self.scan, self.node = scan, node

    def __str__(self) -> str:
        return self.scan.segment(self.node)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _mutation(st: _State, node: ast.AST, expr: ast.AST, is_store: bool) -> str | None:
    scan = st.scan
    fn = enclosing_function(scan, node)
    root = _root(expr)
    seg = _Lazy(scan, node)
    if isinstance(root, ast.Name) and scan.aliases.qualnames(root):
        return None  # an imported module, class or builtin: monkey_patch reports it
    if isinstance(root, ast.Name):
        local = fn is not None and root.id in st.locals_of(fn)
        if local and root.id in st.container_aliases(fn):  # type: ignore[arg-type]
            return f"`{seg}` mutates a module-level container through `{root.id}`"
        if not local and root.id in st.containers:
            return f"`{seg}` mutates the module-level container `{root.id}`"
        if not local and fn is not None and is_store and root.id in st.module_names:
            return f"`{seg}` modifies module-level `{root.id}` from inside a function"
    if what := _attribute_mutation(st, expr, seg):
        return what
    if fn is not None and is_store and _is_class_of_self(scan, expr):
        return f"`{seg}` modifies the class from inside a method"
    return None


def _attribute_mutation(st: _State, expr: ast.AST, seg: _Lazy) -> str | None:
    """A container mutated through an attribute: `self.cache[...]`, `ModelNew.cache.append(...)`."""
    for link in _chain(expr):
        if isinstance(link, ast.Attribute) and isinstance(link.value, ast.Name):
            owner, attr = link.value.id, link.attr
            if is_self(link.value) and attr in st.container_attrs:
                return f"`{seg}` mutates a module-level container through `self.{attr}`"
            via_self = is_self(link.value) and attr not in st.instance_attrs
            in_class = any(attr in a for a in st.class_containers.values()) if via_self else (
                attr in st.class_containers.get(owner, ()))
            if in_class:
                return f"`{seg}` mutates the class-level container `{attr}`"
    return None


_SETTERS = frozenset({"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                      "builtins.object.__delattr__", "builtins.type.__setattr__"})
_CONTAINER_METHODS = ("builtins.dict.*", "builtins.list.*", "builtins.set.*", "builtins.bytearray.*",
                      "collections.*.*")


def _calls(st: _State, hits: Hits) -> None:
    """`setattr(ModelNew, "cache", out)` in a function; `dict.__setitem__(_CACHE, k, v)`."""
    scan = st.scan
    for node in scan.nodes:
        if not isinstance(node, ast.Call) or not node.args:
            continue
        fn = enclosing_function(scan, node)
        names = scan.aliases.qualnames(node.func)
        root = _root(node.args[0])
        if not isinstance(root, ast.Name):
            if fn is not None and names & _SETTERS and _is_class_of_self(scan, node.args[0]):
                hits.add(node.lineno, f"`{scan.segment(node)}` modifies the class from inside a method")
            continue
        local = fn is not None and root.id in st.locals_of(fn)
        if names & _SETTERS and fn is not None and not local and root.id in st.module_names:
            hits.add(node.lineno, f"`{scan.segment(node)}` modifies module-level `{root.id}` from inside a function")
        elif first_match(names, _CONTAINER_METHODS) and not local and root.id in st.containers:
            hits.add(node.lineno, f"`{scan.segment(node)}` mutates the module-level container `{root.id}`")


def _is_class_of_self(scan: Scan, expr: ast.AST) -> bool:
    for link in _chain(expr):
        if isinstance(link, ast.Attribute) and link.attr == "__class__":
            return True
        if isinstance(link, ast.Call) and "builtins.type" in scan.aliases.qualnames(link.func):
            return True
    return False


def _rebinding(st: _State, hits: Hits) -> None:
    """`global x` / `nonlocal x` followed by an assignment to x: state between calls."""
    scan = st.scan
    for fn in (n for n in scan.nodes if isinstance(n, _FUNCS)):
        nodes = list(walk_no_defs(_body(fn)))
        for decl in (n for n in nodes if isinstance(n, ast.Global | ast.Nonlocal)):
            kind = "global" if isinstance(decl, ast.Global) else "nonlocal"
            for name in decl.names:
                if any(not _allowed_rebind(scan, v) for v in _assigned(nodes, name)):
                    hits.add(decl.lineno, f"`{kind} {name}` rebinds state kept between calls")


def _assigned(nodes: list[ast.AST], name: str) -> Iterator[ast.AST | None]:
    for n in nodes:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            yield n.value
        elif isinstance(n, ast.AugAssign | ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
            yield None  # augmented: always state
        elif isinstance(n, ast.Delete | ast.For | ast.With) and any(
            isinstance(t, ast.Name) and t.id == name and not isinstance(t.ctx, ast.Load) for t in ast.walk(n)
        ):
            yield None


def _allowed_rebind(scan: Scan, value: ast.AST | None) -> bool:
    """Lazily compiling an extension (`_ext = load_inline(...)`) or resetting to None is fine."""
    if isinstance(value, ast.Constant) and value.value is None:
        return True
    return isinstance(value, ast.Call) and scan.resolves(value.func, "torch.utils.cpp_extension.load*")


def _mutable_defaults(st: _State, hits: Hits) -> None:
    for fn in (n for n in st.scan.nodes if isinstance(n, _FUNCS)):
        for d in [*fn.args.defaults, *(k for k in fn.args.kw_defaults if k is not None)]:
            if st.mutable(d):
                hits.add(d.lineno, f"mutable default argument `{st.scan.segment(d)}`")


def _native(scan: Scan, hits: Hits) -> None:
    for s in scan.strings:
        if not s.native:
            continue
        code = strip_preprocessor(s.code)
        for off, decl in static_variables(code):
            hits.add(s.line + code.count("\n", 0, off), f"`{decl}` (a non-const static variable in "
                     "C++/CUDA; make it const/constexpr or a local)", key=("static", decl))
        for off, decl in namespace_state(code):
            hits.add(s.line + code.count("\n", 0, off), f"`{decl}` (a mutable namespace-scope "
                     "variable in C++/CUDA)", key=("global", decl))
