"""Owns the small, domain-free helpers over Python syntax trees that both a domain's static
checks and a policy's source rewrites use (standard library only)."""

from __future__ import annotations

import ast
from collections.abc import Iterator


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
