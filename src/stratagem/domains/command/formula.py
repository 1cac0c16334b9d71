"""Owns the arithmetic a problem declares over its sizes (`[work] flops = "2 * n * w"`): parsed
once, checked for unknown names, evaluated per evaluation on the drawn sizes. Numbers, size names,
+ - * / // % ** and parentheses only: nothing is called, nothing imported. Standard library only."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Set

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def check(text: str, names: Set[str]) -> None:
    """Raises ValueError naming what in `text` is not arithmetic over `names`."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an expression: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names:
            raise ValueError(f"{node.id!r} is not a size (sizes: {', '.join(sorted(names)) or 'none'})")
        if not isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Constant | ast.Name | ast.Load
                          | ast.operator | ast.unaryop):
            raise ValueError(f"{type(node).__name__} is not allowed (numbers, sizes, + - * / // % ** only)")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int | float)):
            raise ValueError(f"{node.value!r} is not a number")
        if isinstance(node, ast.BinOp) and type(node.op) not in _BINARY:
            raise ValueError(f"{type(node.op).__name__} is not allowed")


def evaluate(text: str, sizes: Mapping[str, float]) -> float:
    """`text`'s value with `sizes` (checked first).

    Raises:
        ValueError: not arithmetic over the sizes, or a value it cannot have (division by zero).
    """
    check(text, set(sizes))

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            return float(sizes[node.id])
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](value(node.operand))
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"{type(node).__name__} is not allowed")

    try:
        return value(ast.parse(text, mode="eval"))
    except (ZeroDivisionError, OverflowError) as e:
        raise ValueError(f"{text!r}: {e}") from None
