"""Owns folding the strings a candidate builds into text, for scanning (syntax only).

`SRC = A + B`, f-strings, `"".join([...])`, `"{}".format(...)`, `"%s" % x` and `.replace` are
evaluated over string constants and over the names assigned strings anywhere in the file, so
native code split across pieces is scanned whole. Unknown parts fold to "". Every value is
capped and each name folded once, so a hostile file cannot make folding slow.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict


def literal_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def is_str_expr(node: ast.AST, names: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether `node` builds a string (given `names`, the names known to hold strings)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod | ast.Mult):
        return is_str_expr(node.left, names) or is_str_expr(node.right, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("join", "format", "replace") and is_str_expr(node.func.value, names)
    return False


class StringFolder:
    """Best-effort value of string expressions (concatenation, f-strings, join/format/replace,
    names assigned strings anywhere in the file); unknown parts fold to "". Each name is folded
    once (memoized, cycles fold to "") and every value is capped, so folding stays cheap."""

    def __init__(self, tree: ast.Module) -> None:
        self.env: dict[str, list[ast.AST]] = defaultdict(list)
        self._memo: dict[str, str] = {}
        self._active: set[str] = set()
        assigns = sorted(
            ((n.lineno, t.id, n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)),
            key=lambda x: x[0],
        )
        known: set[str] = set()
        for _ in range(4):  # in source order: `a = "x"; b = a + a` makes b a string too
            before = len(known)
            known.update(k for _, k, v in assigns if _stringish(v, known))
            if len(known) == before:
                break
        self.names = frozenset(known)
        for _, k, v in assigns:
            if _stringish(v, self.names):
                self.env[k].append(v)

    def fold(self, node: ast.AST | None, depth: int = 0) -> str:
        if node is None or depth > 40:
            return ""
        return self._fold(node, depth + 1)[:_MAX_FOLD]

    def _fold(self, node: ast.AST, d: int) -> str:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else ""
        if isinstance(node, ast.JoinedStr):
            return "".join(self.fold(v, d) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.fold(node.value, d)
        if isinstance(node, ast.BinOp):
            return self._binop(node, d)
        if isinstance(node, ast.Name):
            return self._name(node.id, d)
        if isinstance(node, ast.List | ast.Tuple):
            return "\n".join(self.fold(e, d) for e in node.elts)
        if isinstance(node, ast.IfExp):
            return self.fold(node.body, d) + "\n" + self.fold(node.orelse, d)
        if isinstance(node, ast.Call):
            return self._call(node, d)
        return ""

    def _name(self, name: str, d: int) -> str:
        if name in self._memo:
            return self._memo[name]
        if name in self._active:
            return ""
        self._active.add(name)
        text = "\n".join(self.fold(v, d) for v in self.env.get(name, ()))[:_MAX_FOLD]
        self._active.discard(name)
        self._memo[name] = text
        return text

    def _binop(self, node: ast.BinOp, d: int) -> str:
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

    def constants_in(self, node: ast.AST) -> set[ast.AST]:
        """The string constants `node` is built from, following names."""
        out: set[ast.AST] = set()
        todo, seen = [node], set()
        while todo:
            n = todo.pop()
            for sub in ast.walk(n):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    out.add(sub)
                elif isinstance(sub, ast.Name) and sub.id not in seen:
                    seen.add(sub.id)
                    todo.extend(self.env.get(sub.id, ()))
        return out

    def fold_list(self, node: ast.AST | None, depth: int = 0) -> list[str]:
        """Literal string items of a list/tuple (or one string), following names."""
        if node is None or depth > 8:
            return []
        if isinstance(node, ast.Name):
            return [s for v in self.env.get(node.id, ()) for s in self.fold_list(v, depth + 1)]
        if isinstance(node, ast.List | ast.Tuple):
            return [s for e in node.elts for s in self.fold_list(e, depth + 1)]
        s = literal_str(node)
        return [s] if s is not None else []


_MAX_FOLD = 1 << 18
"""The longest folded string kept (256 KiB): `a = b + b; b = c + c; ...` cannot blow up."""
_WIDE_PERCENT = re.compile(r"%[-+ #0]*(?:\*|\d)")


def _stringish(node: ast.AST, names: set[str] | frozenset[str]) -> bool:
    if is_str_expr(node, names):
        return True
    return isinstance(node, ast.List | ast.Tuple) and any(is_str_expr(e, names) for e in node.elts)
