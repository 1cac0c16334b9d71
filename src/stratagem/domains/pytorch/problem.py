"""Owns loading KernelBench-format problem files in the parent, by reading their syntax only.

A problem file defines `class Model`, `get_inputs()` and `get_init_inputs()`, and module-level
size constants. It may also declare harness settings in a literal dict:

    STRATAGEM = {"validators": ["static_checks", "load", "correctness"],
                 "tolerances": {"float32": {"atol": 1e-3, "rtol": 1e-3}},
                 "correctness_trials": 10, "timeout_s": 300}

Nothing here executes the file: that happens only in the sandboxed worker.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stratagem.core import pysyntax
from stratagem.core.problem import Problem
from stratagem.errors import ProblemError, read_text

SETTINGS_NAME = "STRATAGEM"
SETTINGS_KEYS = frozenset(
    {"validators", "tolerances", "correctness_trials", "timeout_s", "shapes", "integrity", "correctness", "off_distribution"}
)

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


def load_problem(path: str | Path) -> Problem:
    """Read and check a KernelBench-format problem file.

    Raises:
        ProblemError: the file is missing, unreadable, not Python, or lacks required names.
    """
    p = Path(path)
    source = read_text(p, "problem file", ProblemError)
    # KernelBench names problems by file (19_ReLU.py); bundled examples by folder (05_conv/problem.py).
    name = p.parent.name if p.stem == "problem" and p.parent.name else p.stem
    return parse_problem(source, name=name, path=str(p))


def parse_problem(source: str, *, name: str, path: str | None = None) -> Problem:
    """Check a problem's source and extract its size constants and settings."""
    where = path or name
    try:
        tree = pysyntax.parse(source, filename=where)
    except SyntaxError as e:
        raise ProblemError(f"{where}: syntax error at line {e.lineno}: {e.msg}") from e
    top = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    problems: list[str] = []
    model = top.get("Model")
    if not isinstance(model, ast.ClassDef):
        problems.append("no top-level `class Model`")
    elif not _has_method(model, "forward") and not model.bases:
        problems.append("`Model` defines no `forward` method")
    for fn in ("get_inputs", "get_init_inputs"):
        node = top.get(fn)
        if not isinstance(node, ast.FunctionDef):
            problems.append(f"no top-level function `{fn}()`")
        elif _required_positional(node) > 0:
            problems.append(f"`{fn}()` must take no arguments")
    if problems:
        raise ProblemError(f"{where} is not a KernelBench-format problem: " + "; ".join(problems))
    return Problem(
        name=name,
        domain="pytorch",
        source=source,
        path=path,
        size_constants=size_constants(tree),
        settings=_settings(tree, where),
    )


def _has_method(cls: ast.ClassDef, name: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in cls.body)


def _required_positional(fn: ast.FunctionDef) -> int:
    args = fn.args
    positional = len(args.posonlyargs) + len(args.args)
    return positional - len(args.defaults)


def _bindings(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) of each module-level `name = value` or `name: T = value`, in order."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            yield target.id, value


def size_constants(tree: ast.Module) -> dict[str, int | float]:
    """Module-level names bound to numbers or arithmetic over earlier ones (`N = 2048 * 2`)."""
    found: dict[str, int | float] = {}
    for name, value in _bindings(tree):
        if name == SETTINGS_NAME:
            continue
        v = _eval_number(value, found)
        if v is not None:
            found[name] = v
    return found


def _eval_number(node: ast.expr, env: Mapping[str, int | float]) -> int | float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _eval_number(node.operand, env)
        return None if v is None else -v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval_number(node.left, env), _eval_number(node.right, env)
        if a is None or b is None:
            return None
        try:
            return _BINOPS[type(node.op)](a, b)
        except (ArithmeticError, ValueError):
            return None
    return None


def _settings(tree: ast.Module, where: str) -> dict[str, Any]:
    for name, expr in _bindings(tree):
        if name == SETTINGS_NAME:
            try:
                value = ast.literal_eval(expr)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
                raise ProblemError(f"{where}: {SETTINGS_NAME} must be a literal dict") from e
            if not isinstance(value, dict):
                raise ProblemError(f"{where}: {SETTINGS_NAME} must be a dict")
            unknown = sorted(set(value) - SETTINGS_KEYS)
            if unknown:
                raise ProblemError(
                    f"{where}: unknown {SETTINGS_NAME} keys {unknown}; "
                    f"known: {sorted(SETTINGS_KEYS)}"
                )
            _check_settings(value, where)
            return value
    return {}


def _tolerances_ok(tol: Any) -> bool:
    """A dict of dtype name -> {"atol": x, "rtol": y}, each a number >= 0."""
    return isinstance(tol, dict) and all(
        isinstance(k, str) and isinstance(t, dict) and set(t) == {"atol", "rtol"}
        and all(isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in t.values())
        for k, t in tol.items())


def _correctness_ok(corr: Any) -> bool:
    """A rule's name, or a dict of its mode and numbers >= 0."""
    keys = {"mode", "factor", "atol_floor", "ulp_floor"}
    return corr in ("reference", "fixed", "calibrated") or (
        isinstance(corr, dict) and set(corr) <= keys
        and corr.get("mode", "calibrated") in ("reference", "fixed", "calibrated")
        and all(isinstance(corr[k], int | float) and not isinstance(corr[k], bool) and corr[k] >= 0
                for k in corr if k != "mode"))


def _check_settings(value: dict[str, Any], where: str) -> None:
    def bad(key: str, want: str) -> ProblemError:
        return ProblemError(f"{where}: {SETTINGS_NAME}[{key!r}] must be {want}")

    v = value.get("validators")
    if v is not None and (not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v)):
        raise bad("validators", "a list of validator names")
    tol = value.get("tolerances")
    if tol is not None and not _tolerances_ok(tol):
        raise bad("tolerances", 'a dict like {"float32": {"atol": 1e-4, "rtol": 1e-4}}')
    n = value.get("correctness_trials")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise bad("correctness_trials", "a positive integer")
    if value.get("integrity", "lenient") not in ("lenient", "strict"):
        raise bad("integrity", '"lenient" or "strict"')
    off = value.get("off_distribution")
    if off is not None and not (isinstance(off, bool) or (isinstance(off, int | float) and off > 0)):
        raise bad("off_distribution", "True, False or a positive input scale")
    corr = value.get("correctness")
    if corr is not None and not _correctness_ok(corr):
        raise bad("correctness", '"reference", "fixed", "calibrated" or a dict like {"mode": "calibrated", "factor": 4}')
    shapes = value.get("shapes")
    if shapes is not None and shapes is not False and not (
        isinstance(shapes, list)
        and all(isinstance(v, dict) and all(isinstance(k, str) for k in v) for v in shapes)
    ):
        raise bad("shapes", "False or a list of dicts of size constants")
    t = value.get("timeout_s")
    if t is not None and (not isinstance(t, int | float) or isinstance(t, bool) or t <= 0):
        raise bad("timeout_s", "a positive number of seconds")
