"""Owns the small, domain-free helpers over Python syntax trees that both a domain's static
checks and a policy's source rewrites use (standard library only)."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from typing import Any

_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse`, one thread at a time. CPython 3.11 keeps the AST constructor's recursion
    depth in per-interpreter state: when a garbage collection inside one thread's parse runs
    a finalizer that lets another thread parse, the first fails with `SystemError: AST
    constructor recursion depth mismatch` (python/cpython#106905). pydantic-ai runs sync
    output validators and tools in worker threads, so two Implementors' static checks parse
    at once; every parse in stratagem goes through here."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


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


def bound_names(nodes: Iterator[ast.AST]) -> set[str]:
    """Names the nodes bind: assignment targets, defs and classes, import aliases."""
    out: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


class _Normalize(ast.NodeTransformer):
    """Docstrings dropped, each function's parameters and locals renamed by order of first
    appearance, long code strings stripped line by line (see `normal_form`)."""

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:] or [ast.Pass()]
        return body

    def visit_Module(self, node: ast.Module) -> ast.AST:
        node.body = self._body(node.body)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.body = self._body(node.body)
        self.generic_visit(node)
        return node

    depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.body = self._body(node.body)
        node.returns = None
        self.depth += 1
        self.generic_visit(node)  # inner functions first: their own scopes, their own prefix
        self.depth -= 1
        _rename_locals(node, f"_l{self.depth}_")
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and "\n" in node.value and len(node.value) > 80:
            lines = (line.strip() for line in node.value.splitlines())
            node.value = "\n".join(line for line in lines if line)
        return node


def _rename_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str) -> None:
    a = fn.args
    params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(v for v in (a.vararg, a.kwarg) if v))]
    declared = {n for s in ast.walk(fn) if isinstance(s, ast.Global | ast.Nonlocal) for n in s.names}
    stored = [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    local = [n for n in dict.fromkeys([*params, *stored]) if n not in declared]
    names = {old: f"{prefix}{i}" for i, old in enumerate(local)}
    for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(v for v in (a.vararg, a.kwarg) if v)):
        arg.arg = names.get(arg.arg, arg.arg)
        arg.annotation = None
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]


def normal_form(source: str) -> str | None:
    """A form of a Python program that two programs share when they differ only in comments,
    whitespace, docstrings, the annotations of parameters and returns, and the names of each function's
    parameters and local variables (and the blank lines and indentation of long code strings:
    inline CUDA or C++); None when it does not parse. Module-level and attribute names, every
    other string and every operation are kept, so two programs with one form compute the same."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    tree = _Normalize().visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)
