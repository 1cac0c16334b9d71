"""Owns the `own_kernels` check (strict policy): the candidate launches a kernel it wrote.

A kernel is a `__global__` function in the sources given to `load_inline` that the extension's
exported functions launch (directly or through functions they call), or a `@triton.jit`
function. `ModelNew.forward`, or a function or method it reaches by name, must call an exported
function or launch a Triton kernel (`kernel[grid](...)`). Reachability is by name and
over-approximates; the runtime check (the `provenance` stage, after timing, on the GPU and the
CPU) decides whether the kernel does the work.
"""

from __future__ import annotations

import ast
import re

from stratagem.domains.pytorch.static.ast_scan import Scan, attr_name, dotted
from stratagem.domains.pytorch.static.integrity_checks import Hit
from stratagem.domains.pytorch.static.native_scan import NativeProgram, clean, pybind_exports

WHY = (
    "under the strict policy the candidate must define its own kernel (a `__global__` function "
    "in a load_inline source, or a `@triton.jit` function) and launch it from `ModelNew.forward`"
)
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


def _is_triton_decorator(scan: Scan, node: ast.AST) -> bool:
    expr = node.func if isinstance(node, ast.Call) else node
    return any(
        n.startswith("triton.") and n.rsplit(".", 1)[-1] in _TRITON_DECORATORS
        for n in scan.aliases.qualnames(expr)
    )


def triton_kernels(scan: Scan) -> set[str]:
    out: set[str] = set()
    for node in scan.nodes:
        if isinstance(node, ast.FunctionDef) and any(_is_triton_decorator(scan, d) for d in node.decorator_list):
            out.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_triton_decorator(scan, node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _extensions(scan: Scan) -> list[tuple[ast.Call, NativeProgram, dict[str, str]]]:
    """Each `load_inline` call: its parsed sources and its exports (Python name -> C++ name)."""
    out = []
    for call in scan.extension_calls:
        if not scan.resolves(call.func, "torch.utils.cpp_extension.load_inline"):
            continue
        kw = {k.arg: k.value for k in call.keywords}
        parts = [kw.get("cpp_sources", call.args[1] if len(call.args) > 1 else None),
                 kw.get("cuda_sources", call.args[2] if len(call.args) > 2 else None)]
        raw = "\n".join(scan.folder.fold(p) for p in parts if p is not None)
        named = {n: n for n in scan.folder.fold_list(kw.get("functions"))}
        named.update(pybind_exports(raw))
        out.append((call, NativeProgram.parse(clean(raw)), named))
    return out


def cuda_exports(scan: Scan) -> tuple[set[str], set[str], list[str]]:
    """(kernels defined, exported names that launch one, problems found on the way)."""
    kernels: set[str] = set()
    exports: set[str] = set()
    notes: list[str] = []
    for call, prog, named in _extensions(scan):
        kernels |= prog.kernels
        if not prog.kernels:
            continue
        launching = {py for py, cpp in named.items() if prog.launched_from({cpp})}
        unparsed = {py for py, cpp in named.items() if cpp not in prog.functions}
        if unparsed and not launching and any(prog.launches(b) for bs in prog.functions.values() for b in bs):
            launching = unparsed  # an exported function we could not parse: give it the benefit
        if not launching:
            notes.append(f"no exported function of the extension at line {call.lineno} launches one of "
                         f"its kernels ({', '.join(sorted(prog.kernels))})")
        exports |= launching
    return kernels, exports, notes


def _reachable(scan: Scan) -> list[ast.AST]:
    """Functions reachable by name from ModelNew.forward (all ModelNew methods if none)."""
    defs: dict[str, list[ast.AST]] = {}
    for node in scan.nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs.setdefault(node.name, []).append(node)
    model = next((n for n in scan.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if model is None:
        return []
    methods = [m for m in model.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
    todo: list[ast.AST] = [m for m in methods if m.name in ("forward", "__call__")] or list(methods)
    todo += [d for b in model.bases if isinstance(b, ast.Name) for d in defs.get(b.id, [])]
    seen: set[int] = set()
    out: list[ast.AST] = []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ast.ClassDef):
            todo.extend(m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef))
            continue
        out.append(node)
        for n in ast.walk(node):
            name = n.id if isinstance(n, ast.Name) else attr_name(n)
            if name in defs:
                todo.extend(defs[name])
    return out


def _aliases_of(scan: Scan, names: set[str]) -> set[str]:
    """Names also bound to one of `names` (`self.op = ext.relu` makes `op` one)."""
    out = set(names)
    for node in scan.nodes:
        if isinstance(node, ast.Assign):
            src = node.value.id if isinstance(node.value, ast.Name) else attr_name(node.value)
            if src in out:
                out.update((dotted(t) or "").rsplit(".", 1)[-1] for t in node.targets)
    return out - {""}


def _launches(scan: Scan, bodies: list[ast.AST], triton: set[str], exports: set[str]) -> bool:
    for body in bodies:
        for n in ast.walk(body):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Subscript) and any(
                (isinstance(x, ast.Name) and x.id in triton) or attr_name(x) in triton for x in ast.walk(f.value)
            ):
                return True
            name = f.id if isinstance(f, ast.Name) else attr_name(f)
            if name in exports:
                return True
            if name in ("run", "warmup") and isinstance(f, ast.Attribute) and (
                (isinstance(f.value, ast.Name) and f.value.id in triton) or attr_name(f.value) in triton
            ):
                return True
    return False


_LOOP = re.compile(r"\b(for|while)\s*\(|#\s*pragma\s+omp|\bparallel_for\b")


def cpp_exports(scan: Scan) -> tuple[set[str], set[str]]:
    """For the CPU: (C++ functions defined in `load_inline` sources, exported names that
    reach one that loops over the data itself: a `for`/`while` loop, an OpenMP pragma or
    `at::parallel_for`, not only calls into torch)."""
    defined: set[str] = set()
    exports: set[str] = set()
    for _call, prog, named in _extensions(scan):
        defined |= set(prog.functions)
        for py, cpp in named.items():
            reach = prog.reachable({cpp})
            if any(_LOOP.search(body) for name in reach for body in prog.functions.get(name, ())):
                exports.add(py)
    return defined, exports




def own_kernels_cpu(scan: Scan) -> list[Hit]:
    """`own_kernels` for the CPU device: a C++ function the candidate compiles itself with
    `load_inline`, which loops over the data and is called from `ModelNew.forward`, counts as
    its own kernel, as do the GPU kinds. The `provenance` stage then checks at run time that
    the timed calls spend their time in it (worker/provenance.py)."""
    if not own_kernels(scan):
        return []
    defined, exports = cpp_exports(scan)
    if exports and _launches(scan, _reachable(scan), set(), _aliases_of(scan, exports)):
        return []
    if defined and not exports:
        return [(None, "no exported C++ function of the candidate's extension loops over the data itself (a "
                       f"wrapper around torch calls is not a kernel of its own): {WHY_CPU}")]
    if exports:
        return [(None, f"C++ functions ({', '.join(sorted(exports))}) are defined but `ModelNew.forward` never "
                       f"calls one: {WHY_CPU}")]
    return [(None, f"the candidate defines no kernel of its own: {WHY_CPU}")]


WHY_CPU = (
    "under the strict policy on the CPU the candidate must compile its own code (a C++ function in a "
    "load_inline source that loops over the data, or a `__global__`/`@triton.jit` kernel) and call it "
    "from `ModelNew.forward`"
)


def own_kernels(scan: Scan) -> list[Hit]:
    triton = triton_kernels(scan)
    kernels, exports, notes = cuda_exports(scan)
    if not triton and not kernels:
        return [(None, f"the candidate defines no kernel of its own: {WHY}")]
    bodies = _reachable(scan)
    if _launches(scan, bodies, _aliases_of(scan, triton), _aliases_of(scan, exports)):
        return []
    names = ", ".join(sorted(triton | kernels))
    detail = f"; {'; '.join(notes)}" if notes else ""
    return [(None, f"kernels ({names}) are defined but `ModelNew.forward` never launches one{detail}: {WHY}")]
