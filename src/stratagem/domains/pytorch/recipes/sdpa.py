"""Owns the `sdpa` recipe's rewrite: finding softmax(q @ k^T * scale) @ v in a reference's
source (syntax only) and replacing it with `scaled_dot_product_attention`.

The scores may be masked before the softmax (`S.masked_fill(cond, float('-inf'))`, as in
KernelBench's MinGPT causal attention: `attn_mask=torch.logical_not(cond)`, a boolean mask that
keeps what masked_fill keeps), and the probabilities may pass through a dropout before `@ v`
(an `nn.Dropout` module of the model, or `F.dropout`): `dropout_p` is then the dropout's own
probability while it is active (training) and 0 otherwise, as the module behaves; at inference
it is the identity either way."""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

from stratagem.core import pysyntax
from stratagem.core.pysyntax import bound_names
from stratagem.core.pysyntax import dotted as _dotted

_SOFTMAX_FUNCS = frozenset({"torch.softmax", "F.softmax", "torch.nn.functional.softmax",
                            "nn.functional.softmax", "functional.softmax", "softmax",
                            "torch.special.softmax"})
_MODULE_RECEIVERS = frozenset({"torch", "F", "nn.functional", "torch.nn.functional",
                               "functional", "torch.special"})
_MATMUL_FUNCS = frozenset({"torch.matmul", "torch.bmm"})
_TRANSPOSE_DIMS = ({-2, -1}, {2, 3})
_BMM_TRANSPOSE_DIMS = ({-2, -1}, {1, 2})
_SDPA = "torch.nn.functional.scaled_dot_product_attention"


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int(node.operand)
        return None if v is None else -v
    return None


@dataclass
class _Def:
    """One top-level `name = value` of a function, with the definitions reaching it."""

    value: ast.expr | None
    """None: bound some other way (a loop, a `with`, an augmented assignment): not inlined."""
    env: dict[str, _Def]


@dataclass
class _Match:
    q: ast.expr
    k: ast.expr
    v: ast.expr
    scale: ast.expr
    inlined: list[_Def]
    leaves: list[tuple[ast.expr, dict[str, _Def]]]
    """Operand expressions and the environment they were written in."""
    mask: ast.expr | None = None
    """The masked_fill condition (True where the score is set to -inf)."""
    dropout_p: ast.expr | None = None


class _Matcher:
    """Matches softmax(q @ k^T * scale, dim=-1) @ v, following single assignments backwards."""

    def __init__(self, env: dict[str, _Def], dropouts: frozenset[str] = frozenset()) -> None:
        self.env = env
        self.dropouts = dropouts
        """Attribute names the module assigns an `nn.Dropout` to (`self.attn_dropout`)."""

    def resolve(
        self, node: ast.expr, env: dict[str, _Def], inlined: list[_Def]
    ) -> tuple[ast.expr, dict[str, _Def]]:
        """Follow names to the values assigned to them (recording each definition used)."""
        for _ in range(8):
            if not isinstance(node, ast.Name):
                break
            d = env.get(node.id)
            if d is None or d.value is None:
                break
            inlined.append(d)
            node, env = d.value, d.env
        return node, env

    def match(self, node: ast.expr) -> _Match | None:
        pair = _matmul_operands(node)
        if pair is None:
            return None
        inlined: list[_Def] = []
        p, p_env = self.resolve(pair[0], self.env, inlined)
        extra: list[tuple[ast.expr, dict[str, _Def]]] = []
        dropout_p = None
        dropped = _dropout(p, self.dropouts)
        if dropped is not None:
            inner, dropout_p = dropped
            extra.append((dropout_p, p_env))
            p, p_env = self.resolve(inner, p_env, inlined)
        scores = _softmax_input(p)
        if scores is None:
            return None
        s, s_env = self.resolve(scores, p_env, inlined)
        mask = None
        masked = _masked_fill(s)
        if masked is not None:
            inner, mask = masked
            mask_env = s_env
            s, s_env = self.resolve(inner, s_env, inlined)
            if any(mask_env.get(n) is d for n in names_in(mask) for d in inlined):
                return None  # a mask computed from the scores themselves: not a fixed mask
            extra.append((mask, mask_env))
        for qk, scale in _scale_splits(s):
            found: list[_Def] = []
            qk_r, qk_env = self.resolve(qk, s_env, found)
            ops = _qk_operands(qk_r)
            if ops is None:
                continue
            q, k = ops
            leaves = [(q, qk_env), (k, qk_env), (pair[1], self.env), *extra]
            if scale is not None:
                leaves.append((scale, s_env))
            one = ast.Constant(1.0)
            return _Match(q, k, pair[1], scale if scale is not None else one,
                          inlined + found, leaves, mask, dropout_p)
        return None


def _matmul_operands(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if (isinstance(node, ast.Call) and _dotted(node.func) in _MATMUL_FUNCS
            and len(node.args) == 2 and not node.keywords):
        return node.args[0], node.args[1]
    return None


def _softmax_input(node: ast.AST) -> ast.expr | None:
    """X for `torch.softmax(X, dim=-1)`, `F.softmax(X, -1)`, `X.softmax(-1)`, ..."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
        return None
    name = _dotted(node.func)
    args = list(node.args)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "softmax" and (
        _dotted(node.func.value) not in _MODULE_RECEIVERS
    ):
        args.insert(0, node.func.value)  # the method form
    elif name not in _SOFTMAX_FUNCS:
        return None
    kw = {k.arg: k.value for k in node.keywords}
    if None in kw or set(kw) - {"dim"} or len(args) + len(kw) != 2:
        return None
    dim = kw["dim"] if "dim" in kw else args[1] if len(args) == 2 else None
    return args[0] if dim is not None and _int(dim) == -1 else None


def _is_neg_inf(node: ast.AST) -> bool:
    """`float('-inf')`, `-float('inf')`, `-math.inf`, `-torch.inf`, `float("-inf")`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        o = node.operand
        if _dotted(o) in ("math.inf", "torch.inf", "np.inf", "numpy.inf"):
            return True
        return (isinstance(o, ast.Call) and _dotted(o.func) == "float" and len(o.args) == 1
                and isinstance(o.args[0], ast.Constant) and str(o.args[0].value).lower() in ("inf", "infinity"))
    return (isinstance(node, ast.Call) and _dotted(node.func) == "float" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).lower() in ("-inf", "-infinity"))


def _masked_fill(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(scores, condition) for `S.masked_fill(cond, -inf)` or `torch.masked_fill(S, cond, -inf)`."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "masked_fill" and _dotted(f.value) != "torch":
        args = [f.value, *node.args]
    elif _dotted(f) == "torch.masked_fill":
        args = list(node.args)
    else:
        return None
    kw = {k.arg: k.value for k in node.keywords}
    if None in kw or set(kw) - {"mask", "value"}:
        return None
    for name in ("input", "mask", "value")[len(args):]:
        if name in kw:
            args.append(kw.pop(name))
    if kw or len(args) != 3 or not _is_neg_inf(args[2]):
        return None
    return args[0], args[1]


def _dropout(node: ast.AST, modules: frozenset[str]) -> tuple[ast.expr, ast.expr] | None:
    """(probabilities, dropout_p) for `self.<dropout module>(P)` or `F.dropout(P, p, training)`."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if (isinstance(f, ast.Attribute) and f.attr in modules and isinstance(f.value, ast.Name)
            and len(node.args) == 1 and not node.keywords):
        active = ast.Attribute(ast.Name(f.value.id, ast.Load()), "training", ast.Load())
        return node.args[0], ast.IfExp(active, ast.Attribute(copy.deepcopy(f), "p", ast.Load()), ast.Constant(0.0))
    if _dotted(f) in ("F.dropout", "torch.nn.functional.dropout", "nn.functional.dropout", "torch.dropout"):
        if any(k.arg is None for k in node.keywords):
            return None
        kw = {str(k.arg): k.value for k in node.keywords}
        if set(kw) - {"p", "training", "train", "inplace"} or not node.args:
            return None
        pos = ["p", "training"] if _dotted(f) != "torch.dropout" else ["p", "train"]
        args = dict(zip(pos, node.args[1:], strict=False))
        if len(node.args) > 3 or any(n in kw for n in args):
            return None
        args.update({k: v for k, v in kw.items() if k != "inplace"})
        p = args.get("p", ast.Constant(0.5))
        training = args.get("training", args.get("train", ast.Constant(True)))
        return node.args[0], ast.IfExp(copy.deepcopy(training), copy.deepcopy(p), ast.Constant(0.0))
    return None


def dropout_modules(tree: ast.AST) -> frozenset[str]:
    """Attribute names a module assigns an `nn.Dropout(...)` to (`self.attn_dropout = nn.Dropout(p)`)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _dotted(n.value.func) in (
                "nn.Dropout", "torch.nn.Dropout", "Dropout"):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    out.add(t.attr)
    return frozenset(out)


def _scale_splits(node: ast.expr) -> list[tuple[ast.expr, ast.expr | None]]:
    """Ways to read `node` as (scores, scale): `S * s` or `s * S` (either side may be the
    scores), `S / d` (scale 1/d), or plain `S` (no scale)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [(node.left, node.right), (node.right, node.left)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return [(node.left, ast.BinOp(ast.Constant(1.0), ast.Div(), node.right))]
    return [(node, None)]


def _qk_operands(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    pair = _matmul_operands(node)
    if pair is None:
        return None
    bmm = isinstance(node, ast.Call) and _dotted(node.func) == "torch.bmm"
    k = _untransposed(pair[1], _BMM_TRANSPOSE_DIMS if bmm else _TRANSPOSE_DIMS)
    return None if k is None else (pair[0], k)


def _untransposed(node: ast.expr, allowed: tuple[set[int], ...]) -> ast.expr | None:
    """k for `k.transpose(-2, -1)`, `torch.transpose(k, -2, -1)` or `k.mT`."""
    if isinstance(node, ast.Attribute) and node.attr == "mT":
        return node.value
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr == "transpose" and (
        _dotted(node.func.value) != "torch"
    ):
        k, dims = node.func.value, node.args
    elif _dotted(node.func) == "torch.transpose" and node.args:
        k, dims = node.args[0], node.args[1:]
    else:
        return None
    ints = {_int(d) for d in dims}
    return k if len(dims) == 2 and len(ints) == 2 and ints in allowed else None


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _stored_names(stmt: ast.stmt) -> set[str]:
    return bound_names(ast.walk(stmt))


def _loaded_names(stmt: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _simple_target(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        t = stmt.targets[0]
        return t.id if isinstance(t, ast.Name) else None
    return None


class _Replace(ast.NodeTransformer):
    """Replaces every matching `P @ v` in one statement (not inside nested functions)."""

    def __init__(self, matcher: _Matcher) -> None:
        self.matcher = matcher
        self.inlined: list[_Def] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        if isinstance(node, ast.expr):
            m = self.matcher.match(node)
            if m is not None and _leaves_unchanged(m, self.matcher.env):
                self.inlined.extend(m.inlined)
                return ast.copy_location(_sdpa_call(m), node)
        return node


def _leaves_unchanged(m: _Match, here: dict[str, _Def]) -> bool:
    """Every name the operands read means at the rewrite point what it meant where written."""
    return all(
        env.get(n) is here.get(n) for expr, env in m.leaves for n in names_in(expr)
    )


def _sdpa_call(m: _Match) -> ast.Call:
    func = pysyntax.parse(_SDPA, mode="eval").body
    kws = [ast.keyword("scale", copy.deepcopy(m.scale))]
    if m.mask is not None:  # masked_fill sets True to -inf; sdpa's boolean mask keeps True
        keep = ast.Call(pysyntax.parse("torch.logical_not", mode="eval").body, [copy.deepcopy(m.mask)], [])
        kws.append(ast.keyword("attn_mask", keep))
    if m.dropout_p is not None:
        kws.append(ast.keyword("dropout_p", copy.deepcopy(m.dropout_p)))
    return ast.Call(func, [copy.deepcopy(m.q), copy.deepcopy(m.k), copy.deepcopy(m.v)], kws)


_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists nested in a compound statement (if/for/while/with/try/match)."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(stmt, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for sub in [*getattr(stmt, "handlers", []), *getattr(stmt, "cases", [])]:
        yield sub.body


def _rewrite_body(body: list[ast.stmt], dropouts: frozenset[str] = frozenset()) -> bool:
    """Rewrite the attention patterns in one straight-line block; drop definitions left unused.

    Only simple statements are rewritten, following assignments made earlier in the same
    block; each block nested in a compound statement is a block of its own, which knows
    nothing of the names assigned outside it (so nothing assigned there can be inlined
    across a branch or a loop).
    """
    env: dict[str, _Def] = {}
    envs: list[dict[str, _Def]] = []
    defs: list[tuple[int, str, _Def]] = []
    inlined: list[_Def] = []
    nested = False
    for i, stmt in enumerate(body):
        envs.append(dict(env))
        if isinstance(stmt, _SIMPLE):
            rep = _Replace(_Matcher(env, dropouts))
            body[i] = rep.visit(stmt)
            inlined.extend(rep.inlined)
        elif not isinstance(stmt, _DEFS):  # nested functions are rewritten on their own
            for block in _blocks(stmt):
                nested = _rewrite_body(block, dropouts) or nested
        target = _simple_target(stmt)
        for name in _stored_names(stmt):
            value = stmt.value if name == target and isinstance(stmt, ast.Assign) else None
            d = _Def(value, dict(env))
            env[name] = d
            if name == target:
                defs.append((i, name, d))
    if not inlined:
        return nested
    _drop_dead(body, envs, [(i, n, d) for i, n, d in defs if any(d is x for x in inlined)])
    return True


def _drop_dead(body: list[ast.stmt], envs: list[dict[str, _Def]],
               candidates: list[tuple[int, str, _Def]]) -> None:
    """Remove inlined definitions no remaining statement reads (latest first, so chains go)."""
    removed: set[int] = set()
    for i, name, d in sorted(candidates, key=lambda c: -c[0]):
        read = any(
            j not in removed and name in _loaded_names(body[j]) and envs[j].get(name) is d
            for j in range(i + 1, len(body))
        )
        if not read:
            removed.add(i)
    body[:] = [s for j, s in enumerate(body) if j not in removed]


def rewrite_attention(tree: ast.Module) -> bool:
    """Replace softmax(q @ k^T * scale [masked_fill -inf], dim=-1) [dropout] @ v with
    scaled_dot_product_attention, in every function of the module; True when at least one
    pattern was replaced."""
    changed = False
    dropouts = dropout_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            changed = _rewrite_body(node.body, dropouts) or changed
    return changed
