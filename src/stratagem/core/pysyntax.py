"""Owns the small, domain-free helpers over Python syntax trees that both a domain's static
checks and a policy's source rewrites use (standard library only)."""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Collection, Iterator
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


LOADERS = frozenset({"load_inline", "load"})
"""Calls that build a native extension (`torch.utils.cpp_extension.load_inline` / `load`):
their `name=` only names the module and its build folder."""

_C_MARKERS = re.compile(r"#\s*include\b|__global__|__device__|\btorch::|\bat::|\bstd::|PYBIND11_MODULE|TORCH_LIBRARY")
_C_LITERAL_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.DOTALL)
_C_TOKEN = re.compile(
    r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_0-9.]+'
    r"|<<=|>>=|\.\.\.|->\*?|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||::|[-+*/%&|^!=<>]=|\S"
)


def c_normal_form(code: str) -> str:
    """C, C++ or CUDA source with its comments dropped and its layout normalized: every line
    but a preprocessor directive becomes one sequence of tokens (split as a C compiler splits
    them, longest operator first, string and character literals whole), and a directive keeps
    its words with single spaces (`#define F(x)` and `#define F (x)` differ). Two sources with
    one form differ only in comments, spaces, line breaks and line continuations."""
    code = _C_LITERAL_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", code)
    code = code.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[str] = []
    run: list[str] = []
    for line in code.splitlines():
        if line.strip().startswith("#"):
            if run:
                out.append(" ".join(_C_TOKEN.findall(" ".join(run))))
                run = []
            out.append(" ".join(line.split()))
        elif line.strip():
            run.append(line)
    if run:
        out.append(" ".join(_C_TOKEN.findall(" ".join(run))))
    return "\n".join(out)


def _is_code_string(value: str) -> bool:
    return "\n" in value and len(value) > 80


def _loader_name(call: ast.Call) -> ast.Constant | None:
    """The `name=` string of an extension loader's call, if it is one."""
    func = dotted(call.func)
    if func is None or func.rsplit(".", 1)[-1] not in LOADERS:
        return None
    for kw in call.keywords:
        if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value
    return None


def _module_names(tree: ast.Module, keep: Collection[str]) -> dict[str, str]:
    """Module-level names a restatement may rename: functions and classes it defines, and names
    bound to a loaded extension or to a code string (not `keep`, dunders, imports or other
    values such as size constants; not a name some string spells, which reflection may use)."""
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            v = node.value
            if (isinstance(v, ast.Call) and _loader_name(v) is not None) or (
                    isinstance(v, ast.Constant) and isinstance(v.value, str) and _is_code_string(v.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [t.id for t in targets if isinstance(t, ast.Name)]
    given = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Call) and (c := _loader_name(n)) is not None}
    spelled = {n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in given}
    names = [n for n in dict.fromkeys(found)
             if n not in keep and n not in spelled and not (n.startswith("__") and n.endswith("__"))]
    return {n: f"_g{i}_" for i, n in enumerate(names)}


class _Normalize(ast.NodeTransformer):
    """Docstrings dropped, each function's parameters and locals renamed by order of first
    appearance, long code strings stripped line by line (C, C++ and CUDA ones to their tokens),
    extension names and the module-level names `_module_names` picks renamed (see
    `normal_form`)."""

    def __init__(self, extensions: dict[str, str] | None = None) -> None:
        self.extensions = extensions or {}
        """Extension name -> its placeholder, in strings and as a word in code strings."""

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
        if not isinstance(node.value, str):
            return node
        if node.value in self.extensions:
            node.value = self.extensions[node.value]
        elif _is_code_string(node.value):
            text = node.value
            for name, placeholder in self.extensions.items():
                text = re.sub(rf"\b{re.escape(name)}\b", placeholder, text)
            node.value = c_normal_form(text) if _C_MARKERS.search(text) else _strip_lines(text)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        """An f-string's pieces keep their tokens' spacing (a piece's edge may split a token
        from the value next to it); only their lines are stripped."""
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                v.value = _strip_lines(v.value) if _is_code_string(v.value) else v.value
            else:
                self.visit(v)
        return node


def _strip_lines(text: str) -> str:
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


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


def _rename_module_names(tree: ast.Module, names: dict[str, str]) -> None:
    """Rename module-level names everywhere they are used (after the functions' locals were
    renamed, a name left with a global's spelling is that global). A name some class body or
    comprehension also binds is left alone: its meaning there is not the global's."""
    top = {id(node) for node in tree.body}
    top_targets = {id(t) for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])}
    bound_elsewhere = {n.id for n in ast.walk(tree)
                       if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and id(n) not in top_targets}
    bound_elsewhere |= {n.name for n in ast.walk(tree)
                        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and id(n) not in top}
    bound_elsewhere |= {(n.asname or n.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.alias)}
    names = {k: v for k, v in names.items() if k not in bound_elsewhere}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and id(n) in top and n.name in names:
            n.name = names[n.name]
        elif isinstance(n, ast.Global | ast.Nonlocal):
            n.names = [names.get(x, x) for x in n.names]


def normal_form(source: str, keep: Collection[str] | None = None) -> str | None:
    """A form of a Python program that two programs share when they differ only in comments,
    whitespace, docstrings, the annotations of parameters and returns, and the names of each function's
    parameters and local variables; in the layout of long code strings (blank lines and
    indentation; in C, C++ and CUDA ones also comments, spaces and line breaks between tokens:
    `c_normal_form`); and in the `name=` of an extension loader (`load_inline`, `load`), the
    same name in other strings and as a word in code strings. None when it does not parse.

    `keep`: None keeps every module-level name; otherwise the module-level functions and
    classes the program defines, and the names bound to a loaded extension or a code string,
    are renamed by order of appearance too, except those in `keep` (the names the harness looks
    up, e.g. `ModelNew`). Every other string, attribute and operation is kept, so two programs
    with one form compute the same."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    ext_names = [c.value for n in ast.walk(tree) if isinstance(n, ast.Call) and (c := _loader_name(n)) is not None]
    extensions = {str(name): f"__ext{i}__" for i, name in enumerate(dict.fromkeys(ext_names)) if name}
    globals_ = _module_names(tree, keep) if keep is not None else {}
    tree = _Normalize(extensions).visit(tree)
    if globals_:
        _rename_module_names(tree, globals_)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)
