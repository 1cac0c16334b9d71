"""Owns the static checks: named, ordered checks over a candidate's source, run in the parent.

Each check has a severity: `reject` fails the `static_checks` validator, `warn` is reported
beside a pass. Checks run in registry order; asking for an unknown check name is an error.
The registry is the seam for the integrity checks (AST patterns, CUDA/Triton source scans).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from stratagem.core.problem import Problem
from stratagem.core.verdict import FailureKind, ValidatorResult
from stratagem.errors import ConfigError

Severity = Literal["reject", "warn"]


@dataclass(frozen=True)
class Finding:
    """One thing a check found."""

    check: str
    message: str
    line: int | None = None


@dataclass(frozen=True)
class CheckInput:
    """What a static check sees: the parsed candidate and the parsed problem."""

    filename: str
    source: str
    tree: ast.Module
    problem_tree: ast.Module


CheckFn = Callable[[CheckInput], list[Finding]]


@dataclass(frozen=True)
class StaticCheck:
    name: str
    severity: Severity
    kind: FailureKind
    """The failure kind reported when a `reject` check finds something."""
    doc: str
    fn: CheckFn


def _top_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node  # type: ignore[return-value]
    return None


def _check_model_new(ci: CheckInput) -> list[Finding]:
    cls = _top_class(ci.tree, "ModelNew")
    if cls is None:
        return [Finding("model_new", f"{ci.filename} defines no top-level `class ModelNew`")]
    if _method(cls, "forward") is None and not cls.bases:
        return [Finding("model_new", "`ModelNew` defines no `forward` method", cls.lineno)]
    return []


def _arity(fn: ast.FunctionDef) -> tuple[int, int | None]:
    """(required positional count, max positional count or None if *args), self excluded."""
    a = fn.args
    names = [*a.posonlyargs, *a.args][1:]
    required = len(names) - len(a.defaults)
    return max(required, 0), (None if a.vararg else len(names))


def _required_kwonly(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    return {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None}


def _compatible(ref: ast.FunctionDef, new: ast.FunctionDef) -> bool:
    rr, rm = _arity(ref)
    nr, nm = _arity(new)
    # ModelNew must accept every call Model accepts: at least as many params, no more required.
    accepts_max = nm is None or (rm is not None and nm >= rm)
    return nr <= rr and accepts_max and _required_kwonly(new) <= _required_kwonly(ref)


def _check_signatures(ci: CheckInput) -> list[Finding]:
    new, ref = _top_class(ci.tree, "ModelNew"), _top_class(ci.problem_tree, "Model")
    if new is None or ref is None:
        return []
    findings = []
    for meth in ("__init__", "forward"):
        rf, nf = _method(ref, meth), _method(new, meth)
        if rf is None or nf is None or _compatible(rf, nf):
            continue
        findings.append(
            Finding(
                "signatures",
                f"ModelNew.{meth}({_params(nf)}) cannot be called like Model.{meth}({_params(rf)})",
                nf.lineno,
            )
        )
    return findings


def _params(fn: ast.FunctionDef) -> str:
    a = fn.args
    names = [x.arg for x in [*a.posonlyargs, *a.args][1:]]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    return ", ".join(names)


REGISTRY: tuple[StaticCheck, ...] = (
    StaticCheck(
        "model_new",
        "reject",
        "malformed",
        "The candidate defines a top-level `class ModelNew` with a `forward` method.",
        _check_model_new,
    ),
    StaticCheck(
        "signatures",
        "reject",
        "malformed",
        "`ModelNew.__init__` and `forward` accept the same arguments as `Model`'s.",
        _check_signatures,
    ),
)


def check_names() -> tuple[str, ...]:
    return tuple(c.name for c in REGISTRY)


def select(names: Iterable[str] | None) -> tuple[StaticCheck, ...]:
    """The checks to run, in registry order.

    Raises:
        ConfigError: a name is not a known check.
    """
    if names is None:
        return REGISTRY
    wanted = list(names)
    unknown = sorted(set(wanted) - set(check_names()))
    if unknown:
        raise ConfigError(f"unknown static checks {unknown}; known: {list(check_names())}")
    return tuple(c for c in REGISTRY if c.name in wanted)


def run_static_checks(
    problem: Problem,
    source: str,
    filename: str = "candidate.py",
    checks: Sequence[StaticCheck] = REGISTRY,
) -> ValidatorResult:
    """The `static_checks` validator: parse the candidate, then run every selected check."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        return ValidatorResult(
            name="static_checks",
            outcome="failed",
            kind="malformed",
            reason=f"{filename}: syntax error at line {e.lineno}: {e.msg}",
            details={"line": e.lineno, "text": (e.text or "").rstrip()},
        )
    ci = CheckInput(filename, source, tree, ast.parse(problem.source))
    rejects: list[tuple[StaticCheck, Finding]] = []
    warnings: list[dict[str, object]] = []
    for check in checks:
        for f in check.fn(ci):
            item = {"check": f.check, "message": f.message, "line": f.line}
            if check.severity == "reject":
                rejects.append((check, f))
            else:
                warnings.append(item)
    details: dict[str, object] = {"checks": [c.name for c in checks], "warnings": warnings}
    if not rejects:
        return ValidatorResult(name="static_checks", outcome="passed", details=details)
    details["rejections"] = [
        {"check": f.check, "message": f.message, "line": f.line} for _, f in rejects
    ]
    reason = "; ".join(
        f"{f.message}" + (f" (line {f.line})" if f.line else "") for _, f in rejects
    )
    return ValidatorResult(
        name="static_checks", outcome="failed", kind=rejects[0][0].kind, reason=reason,
        details=details,
    )
