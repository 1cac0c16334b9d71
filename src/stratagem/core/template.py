"""Owns design templates: a design whose files declare parameters, their space and the
constraints between them, and say where each value goes (docs/tune.md).

A declaration is a whole comment line (`#`, `//`, `--` or `;` comments, so it fits Python,
C, CUDA, shell and SQL files alike) in any of the design's files::

    # stratagem: param BLOCK = pow2(16, 256)      # 16, 32, ..., 256
    # stratagem: param UNROLL = int(1, 8)          # 1..8; int(8, 64, step=8) for 8, 16, ...
    # stratagem: param IMPL = choice("loop", "vectorized")
    # stratagem: param TILE = pow2(4, 64, default=16)  # default=: the value the design has unless tuned
    # stratagem: require BLOCK % TILE == 0

and `{{BLOCK}}` in a file is replaced by the value (ints in decimal, strings verbatim). A point
of the space renders to ordinary files (`Template.render`), each declaration line replaced by a
comment that records the value (`# stratagem: tuned BLOCK = 64`), so the rendered design is
evaluated like any other and declares no template itself.

Every parameter has a **default**: `default=V` in its space, else its first value (the lowest
of an `int` or `pow2`, the first `choice`). The defaults are the point a template stands for when
it is built as it is (`Template.defaults`, `render_defaults`): a command problem's reference that
declares a template is built at its defaults.

Nothing here evaluates code: spaces are read from the syntax tree of a call, and constraints by
a small evaluator that admits names, numbers, strings, arithmetic, comparisons and `and`/`or`/
`not`. Errors name the file and the line. Standard library only.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from stratagem.core.problem import content_hash
from stratagem.errors import ConfigError

Value = int | float | str
"""A parameter's value."""
Point = dict[str, Value]
"""One point of a template's space: parameter name -> value."""
Kind = Literal["int", "pow2", "choice"]

ENUMERATE_MAX = 100_000
"""Spaces up to this many points can be listed whole (`Template.points`)."""

_DECL = re.compile(r"^(?P<indent>\s*)(?P<mark>#|//|--|;)\s*stratagem:\s*(?P<verb>param|require)\b(?P<rest>.*)$")
_PARAM = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<space>.+?)\s*$")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
"""`{{NAME}}`: replaced by NAME's value. A `{{name}}` naming no declared parameter is left alone
(Python f-strings and C++ initialisers write `{{`)."""


class TemplateError(ConfigError):
    """A template that cannot be read (its file and line named), or a point outside its space."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        where = f"{file}:{line}: " if file is not None and line is not None else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")
        self.reason = message
        """The message without the place."""
        self.file = file
        self.line = line


@dataclass(frozen=True)
class Param:
    """One declared parameter and its space."""

    name: str
    kind: Kind
    values: tuple[Value, ...]
    """Every value it may take, in order (ascending for `int` and `pow2`)."""
    spec: str
    """The space as written (`pow2(16, 256)`)."""
    file: str
    line: int
    """Where it is declared (1-based)."""
    default: Value | None = None
    """The value declared with `default=` (None: the first value is the default; see `fallback`)."""

    @property
    def fallback(self) -> Value:
        """Its default value: the declared one, else its first value."""
        return self.default if self.default is not None else self.values[0]

    @property
    def low(self) -> int | None:
        """The smallest value of an `int` or `pow2` space (None for `choice`)."""
        return int(self.values[0]) if self.kind != "choice" else None

    @property
    def high(self) -> int | None:
        return int(self.values[-1]) if self.kind != "choice" else None


@dataclass(frozen=True)
class Constraint:
    """One `require` line: a condition every point must meet before it is rendered."""

    text: str
    file: str
    line: int
    tree: ast.Expression

    def holds(self, point: Mapping[str, Value]) -> bool:
        """Whether the point meets it (an arithmetic error, such as a division by zero, or a
        type error, such as a string compared with a number, counts as not met)."""
        try:
            return bool(_eval(self.tree.body, point))
        except (ArithmeticError, TypeError, ValueError):
            return False


@dataclass(frozen=True)
class Template:
    """A design's files with their parameters and constraints."""

    files: Mapping[str, str]
    """File name -> text, declarations and placeholders included."""
    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...] = ()

    @property
    def id(self) -> str:
        """Content hash of the files: a study belongs to one template."""
        return content_hash(json.dumps(dict(sorted(self.files.items())), ensure_ascii=False))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def size(self) -> int:
        """Points in the space, constraints not applied."""
        return math.prod(len(p.values) for p in self.params)

    @property
    def defaults(self) -> Point:
        """The point of every parameter's default (`Param.fallback`); it may violate a constraint
        when no parameter declares a default (`render_defaults` then says so)."""
        return {p.name: p.fallback for p in self.params}

    def violations(self, point: Mapping[str, Value]) -> list[str]:
        """The constraints the point does not meet (as written), empty when it meets them all."""
        return [c.text for c in self.constraints if not c.holds(point)]

    def check(self, point: Mapping[str, Value]) -> None:
        """Raises TemplateError unless the point gives every parameter a value of its space (and
        nothing else) and meets every constraint."""
        missing = [p.name for p in self.params if p.name not in point]
        extra = sorted(set(point) - set(self.names))
        if missing or extra:
            raise TemplateError(f"the point {dict(point)} does not match the parameters {list(self.names)}"
                                f" (missing {missing}, unknown {extra})")
        for p in self.params:
            if point[p.name] not in p.values:
                raise TemplateError(f"{p.name} = {point[p.name]!r} is outside its space {p.spec}", p.file, p.line)
        broken = self.violations(point)
        if broken:
            raise TemplateError(f"the point {dict(point)} violates: {'; '.join(broken)}")

    def render(self, point: Mapping[str, Value]) -> dict[str, str]:
        """The design at `point`: placeholders filled, each declaration line replaced by a
        comment recording the value or the condition.

        Raises:
            TemplateError: the point is outside the space or violates a constraint (see `check`).
        """
        self.check(point)
        out = {}
        for name, text in self.files.items():
            lines = []
            for line in text.splitlines(keepends=True):
                m = _DECL.match(line.rstrip("\r\n"))
                if m is not None:
                    end = line[len(line.rstrip("\r\n")):]
                    lines.append(_recorded(m, point) + end)
                else:
                    lines.append(PLACEHOLDER.sub(lambda mm: _fill(mm, point), line))
            out[name] = "".join(lines)
        return out

    def points(self) -> Iterator[Point]:
        """Every point that meets the constraints, in declaration order (the first parameter
        varies slowest).

        Raises:
            TemplateError: the space has more than ENUMERATE_MAX points.
        """
        if self.size > ENUMERATE_MAX:
            raise TemplateError(f"the space has {self.size} points, more than can be listed ({ENUMERATE_MAX})")
        for values in itertools.product(*(p.values for p in self.params)):
            point = dict(zip(self.names, values, strict=True))
            if not self.violations(point):
                yield point


def render_defaults(files: Mapping[str, str]) -> dict[str, str]:
    """Files as they are built: a template rendered at its defaults (`Template.defaults`); files
    that declare no parameter, unchanged.

    Raises:
        TemplateError: a template that cannot be read, or whose defaults violate a constraint.
    """
    if not is_template(files):
        return dict(files)
    t = parse_template(files)
    broken = t.violations(t.defaults)
    if broken:
        raise TemplateError(f"the defaults {t.defaults} violate {'; '.join(broken)}: declare defaults that meet "
                            "every constraint (`param NAME = pow2(LO, HI, default=V)`)", t.params[0].file,
                            t.params[0].line)
    return t.render(t.defaults)


def is_template(files: Mapping[str, str]) -> bool:
    """Whether any file declares a parameter (a cheap test; `parse_template` reads it)."""
    return any(_DECL.match(line) for text in files.values() for line in text.splitlines())


def parse_template(files: Mapping[str, str]) -> Template:
    """Read a template from a design's files.

    Raises:
        TemplateError: no parameter declared; a declaration that cannot be read, a duplicate, a
            constraint naming an unknown parameter or using something other than arithmetic and
            comparisons, a parameter used by no placeholder (its file and line named); or a
            space with no point meeting every constraint.
    """
    params, constraints = _declarations(files)
    if not params:
        raise TemplateError("no parameter is declared (a line `# stratagem: param NAME = pow2(16, 256)`, "
                            "docs/tune.md)", next(iter(files), None))
    _check_names(files, params, constraints)
    t = Template(dict(files), tuple(params), tuple(constraints))
    if t.size <= ENUMERATE_MAX and next(t.points(), None) is None:
        c0 = t.constraints[0]
        raise TemplateError(f"no point of the space ({t.size} points) meets every constraint", c0.file, c0.line)
    declared = [p for p in params if p.default is not None]
    broken = t.violations(t.defaults) if declared else []
    if broken:
        raise TemplateError(f"the defaults {t.defaults} violate {'; '.join(broken)}", declared[0].file,
                            declared[0].line)
    return t


def _declarations(files: Mapping[str, str]) -> tuple[list[Param], list[Constraint]]:
    """The parameters and constraints declared in the files, in order; a duplicate is an error."""
    params: list[Param] = []
    constraints: list[Constraint] = []
    for name, text in files.items():
        for n, line in enumerate(text.splitlines(), start=1):
            m = _DECL.match(line)
            if m is None:
                continue
            if m.group("verb") != "param":
                constraints.append(_constraint(m.group("rest").strip(), name, n))
                continue
            p = _param(m.group("rest"), name, n)
            if (first := next((q for q in params if q.name == p.name), None)) is not None:
                raise TemplateError(f"parameter {p.name} is declared twice (first at {first.file}:{first.line})",
                                    name, n)
            params.append(p)
    return params, constraints


def _check_names(files: Mapping[str, str], params: list[Param], constraints: list[Constraint]) -> None:
    """Every constraint names only declared parameters, and a placeholder uses each parameter."""
    known = {p.name for p in params}
    for c in constraints:
        unknown = sorted({x.id for x in ast.walk(c.tree) if isinstance(x, ast.Name)} - known)
        if unknown:
            raise TemplateError(f"`{c.text}` names {', '.join(unknown)}, which is not a declared parameter "
                                f"(declared: {', '.join(sorted(known))})", c.file, c.line)
    used = {m.group(1) for text in files.values() for line in text.splitlines() if not _DECL.match(line)
            for m in PLACEHOLDER.finditer(line)}
    for p in params:
        if p.name not in used:
            raise TemplateError(f"parameter {p.name} is declared but no {{{{{p.name}}}}} placeholder uses it",
                                p.file, p.line)


# -- declarations -------------------------------------------------------------------------------


def _param(rest: str, file: str, line: int) -> Param:
    m = _PARAM.match(rest)
    if m is None:
        raise TemplateError(f"expected `param NAME = SPACE`, got `param{rest}`", file, line)
    name, spec = m.group("name"), m.group("space")
    try:
        call = ast.parse(spec, mode="eval").body
    except SyntaxError as e:
        raise TemplateError(f"{name}: `{spec}` is not a space ({e.msg})", file, line) from None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise TemplateError(f"{name}: `{spec}` is not a space: write int(LO, HI), int(LO, HI, step=S), "
                            "pow2(LO, HI) or choice(A, B, ...)", file, line)
    kind = call.func.id
    try:
        args = [_literal(a) for a in call.args]
        kw = {k.arg: _literal(k.value) for k in call.keywords}
    except ValueError as e:
        raise TemplateError(f"{name}: {e}", file, line) from None
    has_default = "default" in kw
    default = kw.pop("default", None)
    values = _space(name, kind, args, kw, file, line)
    if has_default and default not in values:
        raise TemplateError(f"{name}: default={default!r} is not a value of {kind}(...)", file, line)
    if has_default:
        default = values[values.index(default)]  # the space's own value (2, not 2.0)
    return Param(name, cast(Kind, kind), values, spec, file, line, default)  # `_space` refused other kinds


def _space(name: str, kind: str, args: list[Value], kw: dict[str | None, Value], file: str,
           line: int) -> tuple[Value, ...]:
    def bad(msg: str) -> TemplateError:
        return TemplateError(f"{name}: {msg}", file, line)

    if kind == "choice":
        return _choice(args, kw, bad)
    if kind not in ("int", "pow2"):
        raise bad(f"unknown space `{kind}(...)`: int, pow2 or choice")
    if len(args) != 2 or not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        raise bad(f"{kind}(LO, HI) takes two integers")
    lo, hi = int(args[0]), int(args[1])
    if lo > hi:
        raise bad(f"{kind}({lo}, {hi}): LO is above HI")
    return (_pow2 if kind == "pow2" else _int_range)(lo, hi, kw, bad)


def _choice(args: list[Value], kw: dict[str | None, Value], bad: Callable[[str], TemplateError]
            ) -> tuple[Value, ...]:
    if kw:
        raise bad("choice(...) takes values only (and default=)")
    if not args:
        raise bad("choice() needs at least one value")
    if len(set(args)) != len(args):
        raise bad(f"choice{tuple(args)} repeats a value")
    return tuple(args)


def _pow2(lo: int, hi: int, kw: dict[str | None, Value], bad: Callable[[str], TemplateError]
          ) -> tuple[Value, ...]:
    if kw:
        raise bad("pow2(LO, HI) takes no option but default=")
    if lo < 1 or lo & (lo - 1) or hi & (hi - 1):
        raise bad(f"pow2({lo}, {hi}): LO and HI must be powers of two")
    return tuple(1 << k for k in range(lo.bit_length() - 1, hi.bit_length()))


def _int_range(lo: int, hi: int, kw: dict[str | None, Value], bad: Callable[[str], TemplateError]
               ) -> tuple[Value, ...]:
    extra = set(kw) - {"step"}
    if extra:
        raise bad(f"int(...) takes only step= and default=, not {sorted(str(k) for k in extra)}")
    step = kw.get("step", 1)
    if not isinstance(step, int) or step < 1:
        raise bad("step must be a positive integer")
    if (hi - lo) // step + 1 > ENUMERATE_MAX * 10:
        raise bad(f"int({lo}, {hi}, step={step}) has too many values")
    return tuple(range(lo, hi + 1, step))


def _literal(node: ast.expr) -> Value:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        v = node.operand.value
        if isinstance(v, int | float) and not isinstance(v, bool):
            return -v
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str) and not isinstance(node.value, bool):
        return node.value
    raise ValueError(f"`{ast.unparse(node)}` is not a number or a string")


def _constraint(text: str, file: str, line: int) -> Constraint:
    if not text:
        raise TemplateError("`require` needs a condition, e.g. `require BLOCK % TILE == 0`", file, line)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise TemplateError(f"`{text}` is not a condition ({e.msg})", file, line) from None
    for node in ast.walk(tree.body):
        if not isinstance(node, _ALLOWED):
            raise TemplateError(f"`{text}`: {type(node).__name__} is not allowed in a condition (names, numbers, "
                                "strings, + - * / // % **, comparisons, and/or/not only)", file, line)
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise TemplateError(f"`{text}`: the constant {node.value!r} is not a number or a string", file, line)
    return Constraint(text, file, line, tree)


def _recorded(m: re.Match[str], point: Mapping[str, Value]) -> str:
    head = f"{m.group('indent')}{m.group('mark')} stratagem:"
    if m.group("verb") == "require":
        return f"{head} required {m.group('rest').strip()}"
    p = _PARAM.match(m.group("rest"))
    name = p.group("name") if p else "?"
    return f"{head} tuned {name} = {_text(point[name])} (of {p.group('space') if p else '?'})"


def _fill(m: re.Match[str], point: Mapping[str, Value]) -> str:
    name = m.group(1)
    return _text(point[name]) if name in point else m.group(0)


def _text(v: Value) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# -- the restricted evaluator of conditions -----------------------------------------------------

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd, ast.BinOp, ast.Compare,
            ast.Name, ast.Load, ast.Constant, ast.Tuple, *_BINARY, *_COMPARE)
POW_MAX = 256
"""The largest exponent `**` computes (so a condition cannot ask for a huge number)."""


def _eval(node: ast.expr, point: Mapping[str, Value]) -> Any:  # noqa: C901 - one case per node type
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return point[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, point) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, point) for v in node.values)
        return any(_eval(v, point) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, point)
        if isinstance(node.op, ast.Not):
            return not v
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, point), _eval(node.right, point)
        if (isinstance(a, str) or isinstance(b, str)) and not isinstance(node.op, ast.Add):
            raise TypeError("strings may only be joined with +")
        if isinstance(node.op, ast.Pow) and (not isinstance(b, int | float) or abs(b) > POW_MAX):
            raise ValueError(f"exponent {b!r} is too large")
        return _BINARY[type(node.op)](a, b)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, point)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, point)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise TypeError(f"{type(node).__name__} is not allowed in a condition")
