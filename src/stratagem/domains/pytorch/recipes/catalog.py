"""Owns the catalog of the `recipes` policy: known transformations of a reference program, and
rendering any compatible set of them into one candidate source.

A rendered candidate is a copy of the problem file (imports, helpers, size constants and the
`Model` class renamed to `_Reference`, with every use of the old name inside the copy renamed
too; `get_inputs`, `get_init_inputs`, the `STRATAGEM` settings and `__main__` blocks dropped),
optionally rewritten (`sdpa`), followed by a `ModelNew` that builds a `_Reference` from the
same constructor arguments (so the same seed gives the same weights) and calls it under the
chosen transformations. Everything is syntax only (`ast`): nothing here imports torch or runs
the problem.

TF32 is deliberately absent. The only switches for TF32 in cuBLAS/cuDNN matmuls and
convolutions are process-wide (`torch.backends.cuda.matmul.allow_tf32`,
`torch.backends.cudnn.allow_tf32`, `torch.set_float32_matmul_precision`, the `fp32_precision`
attributes, and the `torch.backends.cudnn.flags(...)` context manager, which sets the same
globals), and the harness rejects every one of them (`global_flags` static check, flag
snapshot in the worker). Inductor reads the same global when it picks matmul precision, and
`torch.compile(options=...)` has no TF32 option. The only local route is a kernel of one's own
(Triton `tl.dot(..., input_precision="tf32")`), which is a new kernel, not a transformation of
the reference: that is the agents' job, not a recipe's.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from stratagem.core import pysyntax
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.recipes.sdpa import names_in as _names_in
from stratagem.domains.pytorch.recipes.sdpa import rewrite_attention

Tolerances = Mapping[str, Mapping[str, float]]

REFERENCE_CLASS = "_Reference"
"""What the problem's `Model` is called inside a rendered candidate."""

DROPPED_DEFS = frozenset({"get_inputs", "get_init_inputs"})
DROPPED_ASSIGNS = frozenset({"STRATAGEM"})

AUTOCAST_MIN_TOL = {"bfloat16": 1e-2, "float16": 1e-3}
"""The float32 atol and rtol a problem must allow before its matmuls may run in this dtype."""

AUTOCAST_OPS = frozenset(
    "Linear Bilinear LazyLinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d "
    "ConvTranspose3d MultiheadAttention LSTM GRU RNN Transformer TransformerEncoderLayer "
    "TransformerDecoderLayer TransformerEncoder TransformerDecoder matmul mm bmm addmm addbmm "
    "baddbmm einsum linear bilinear conv1d conv2d conv3d conv_transpose1d conv_transpose2d "
    "conv_transpose3d scaled_dot_product_attention tensordot chain_matmul".split()
)
"""Names of modules and functions autocast runs in reduced precision (the matmul family)."""

CONV2D_OPS = frozenset({"Conv2d", "ConvTranspose2d", "LazyConv2d", "conv2d", "conv_transpose2d"})


@dataclass(frozen=True)
class Wrap:
    """What a recipe asks of the `ModelNew` wrapper; a combination merges its recipes' wraps."""

    inference_mode: bool = False
    compile_mode: str | None = None
    """`default` for plain `torch.compile`, else the `mode=` argument."""
    autocast: str | None = None
    """`bfloat16` or `float16`: the forward runs under `torch.autocast`, outputs cast back."""
    channels_last: bool = False

    def merge(self, other: Wrap) -> Wrap:
        """Every field set by either (recipes of one compatibility group never meet here)."""
        return replace(self, **{
            f.name: getattr(other, f.name) for f in fields(self) if getattr(other, f.name)
        })


Condition = Callable[[Problem, Tolerances], bool]
Rewrite = Callable[[ast.Module], bool]
"""Rewrites the copied reference in place; True when it changed something."""


@dataclass(frozen=True)
class Recipe:
    """One known transformation of the reference."""

    name: str
    description: str
    group: str
    """Compatibility group: a combination takes at most one recipe of each group."""
    gpu_only: bool = False
    wrap: Wrap = Wrap()
    rewrite: Rewrite | None = None
    condition: Condition | None = None
    """Whether the problem admits the recipe (besides the device); None: always."""

    def applies(self, problem: Problem, tolerances: Tolerances, on_gpu: bool) -> bool:
        """Whether this recipe can be tried on `problem` under `tolerances` on this device."""
        if self.gpu_only and not on_gpu:
            return False
        if self.rewrite is not None and not self.rewrite(_parse(problem.source)):
            return False
        return self.condition is None or self.condition(problem, tolerances)


# -- conditions ------------------------------------------------------------------------------


def _parse(source: str) -> ast.Module:
    return pysyntax.parse(source)


def _used_names(source: str) -> set[str]:
    """Every bare name and attribute name the source mentions, plus `@` for the matmul operator."""
    out: set[str] = set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.add("@")
    return out


def uses_matmul_family(problem: Problem) -> bool:
    """The reference calls something autocast would run in reduced precision."""
    return bool(_used_names(problem.source) & (AUTOCAST_OPS | {"@"}))


def uses_conv2d(problem: Problem) -> bool:
    """The reference uses a 2-d convolution (module or functional)."""
    return bool(_used_names(problem.source) & CONV2D_OPS)


def tolerance_allows(tolerances: Tolerances, dtype: str) -> bool:
    """The float32 tolerance is loose enough for matmuls computed in `dtype`."""
    tol = tolerances.get("float32")
    need = AUTOCAST_MIN_TOL[dtype]
    return tol is not None and tol.get("atol", 0.0) >= need and tol.get("rtol", 0.0) >= need


def _autocast_condition(dtype: str) -> Condition:
    def cond(problem: Problem, tolerances: Tolerances) -> bool:
        return tolerance_allows(tolerances, dtype) and uses_matmul_family(problem)

    return cond


def _conv_condition(problem: Problem, tolerances: Tolerances) -> bool:
    return uses_conv2d(problem)


# -- the catalog -----------------------------------------------------------------------------

CATALOG: tuple[Recipe, ...] = (
    Recipe("inference_mode", "run the forward under torch.inference_mode() (no autograd "
           "bookkeeping, no version counters)", "grad", wrap=Wrap(inference_mode=True)),
    Recipe("sdpa", "replace the explicit softmax(q @ k^T * scale) @ v with "
           "torch.nn.functional.scaled_dot_product_attention (fused attention kernels)",
           "attention", rewrite=rewrite_attention),
    Recipe("channels_last", "convert the module and 4-d inputs to channels_last memory format "
           "(faster convolution kernels), outputs back to contiguous", "layout",
           wrap=Wrap(channels_last=True), condition=_conv_condition),
    Recipe("autocast-bf16", "run the forward under torch.autocast(dtype=torch.bfloat16): "
           "matmuls and convolutions in bfloat16, outputs cast back", "precision",
           wrap=Wrap(autocast="bfloat16"), condition=_autocast_condition("bfloat16")),
    Recipe("autocast-fp16", "run the forward under torch.autocast(dtype=torch.float16): "
           "matmuls and convolutions in float16, outputs cast back", "precision", gpu_only=True,
           wrap=Wrap(autocast="float16"), condition=_autocast_condition("float16")),
    Recipe("compile", "torch.compile with the default mode (Inductor fusion)", "compile",
           wrap=Wrap(compile_mode="default")),
    Recipe("compile-reduce-overhead", "torch.compile(mode='reduce-overhead'): Inductor plus "
           "CUDA graphs, for launch-bound problems", "compile", gpu_only=True,
           wrap=Wrap(compile_mode="reduce-overhead")),
    Recipe("compile-max-autotune-no-cudagraphs", "torch.compile(mode="
           "'max-autotune-no-cudagraphs'): autotuned GEMM/conv templates, no CUDA graphs",
           "compile", gpu_only=True, wrap=Wrap(compile_mode="max-autotune-no-cudagraphs")),
    Recipe("compile-max-autotune", "torch.compile(mode='max-autotune'): autotuned GEMM/conv "
           "templates (and CUDA graphs on a GPU)", "compile",
           wrap=Wrap(compile_mode="max-autotune")),
)
"""In the order singles are tried: cheap ones first, the slowest compile last."""

BY_NAME: dict[str, Recipe] = {r.name: r for r in CATALOG}


def recipe_names() -> tuple[str, ...]:
    """Every recipe name, in catalog order."""
    return tuple(r.name for r in CATALOG)


def catalog_order(recipes: Sequence[Recipe]) -> list[Recipe]:
    """The recipes sorted as in the catalog (so a combination has one canonical name)."""
    index = {r.name: i for i, r in enumerate(CATALOG)}
    return sorted(recipes, key=lambda r: index.get(r.name, len(index)))


def combination_name(recipes: Sequence[Recipe]) -> str:
    """`a+b+c` in catalog order; a single recipe's name for one."""
    return "+".join(r.name for r in catalog_order(recipes))


# -- rendering -------------------------------------------------------------------------------


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == self.old:
            node.name = self.new
        self.generic_visit(node)
        return node


def _is_main_guard(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "__name__" in _names_in(stmt.test)


def _kept(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name in DROPPED_DEFS:
        return False
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if any(isinstance(t, ast.Name) and t.id in DROPPED_ASSIGNS for t in targets):
            return False
    if isinstance(stmt, ast.Expr):  # module docstring only; no calls at import
        return isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
    return not _is_main_guard(stmt)


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _imports_torch(tree: ast.Module) -> bool:
    return any(
        isinstance(s, ast.Import) and any(a.name == "torch" and a.asname is None for a in s.names)
        for s in tree.body
    )


def _reference_module(problem_source: str, rewrites: Iterator[Rewrite]) -> tuple[str, str]:
    """(copied source, the reference class's new name)."""
    tree = _parse(problem_source)
    tree.body = [s for s in tree.body if _kept(s)]
    taken = _names_in(tree) | {
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)
    }
    ref = _fresh(REFERENCE_CLASS, taken)
    _Rename("Model", ref).visit(tree)
    for rw in rewrites:
        rw(tree)
    if not _imports_torch(tree):
        tree.body.insert(0, ast.Import([ast.alias("torch")]))
    return _unparse_module(ast.fix_missing_locations(tree)), ref


def _unparse_module(tree: ast.Module) -> str:
    """`ast.unparse`, with two blank lines around top-level definitions (PEP 8 layout)."""
    out: list[str] = []
    prev: ast.stmt | None = None
    for stmt in tree.body:
        text = ast.unparse(stmt)
        if prev is not None:
            defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            same_kind = type(prev) is type(stmt) or (
                isinstance(prev, ast.Import | ast.ImportFrom)
                and isinstance(stmt, ast.Import | ast.ImportFrom)
            )
            gap = "\n\n\n" if isinstance(prev, defs) or isinstance(stmt, defs) else (
                "\n" if same_kind else "\n\n")
            out.append(gap)
        out.append(text)
        prev = stmt
    return "".join(out)


def check_compatible(recipes: Sequence[Recipe]) -> None:
    """Raises ValueError when two recipes share a compatibility group (or one is repeated)."""
    seen: dict[str, str] = {}
    for r in recipes:
        if r.group in seen:
            raise ValueError(f"recipes {seen[r.group]!r} and {r.name!r} are both in group "
                             f"{r.group!r}; a combination takes at most one of each group")
        seen[r.group] = r.name


def render(problem_source: str, recipes: Sequence[Recipe]) -> str:
    """The candidate source applying `recipes` (compatible, at least one) to the reference.

    Raises:
        ValueError: no recipe, or two recipes of the same compatibility group.
    """
    if not recipes:
        raise ValueError("render needs at least one recipe")
    recipes = catalog_order(recipes)
    check_compatible(recipes)
    wrap = Wrap()
    for r in recipes:
        wrap = wrap.merge(r.wrap)
    body, ref = _reference_module(problem_source, (r.rewrite for r in recipes if r.rewrite))
    helpers = _helpers(wrap)
    cls = _model_new(wrap, ref, recipes)
    parts = [body, *helpers, cls]
    source = "\n\n\n".join(p.strip("\n") for p in parts) + "\n"
    pysyntax.parse(source)  # a bug here must not reach the harness as a "malformed" candidate
    return source


_HELPER_DEVICE = '''
def _recipe_device_type(args):
    """The device type of the first tensor argument (what autocast runs on)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"
'''

_HELPER_DTYPE = '''
def _recipe_float_dtype(args):
    """The dtype of the first floating-point tensor argument: the outputs' dtype."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.dtype
    return None
'''

_HELPER_CHANNELS_LAST = '''
def _recipe_channels_last(a):
    """4-d tensors in channels_last memory format; anything else unchanged."""
    if isinstance(a, torch.Tensor) and a.dim() == 4:
        return a.contiguous(memory_format=torch.channels_last)
    return a
'''


def _restore_helper(wrap: Wrap) -> str:
    steps = []
    if wrap.autocast:
        steps.append("if dtype is not None and out.is_floating_point() and out.dtype != dtype:\n"
                     "    out = out.to(dtype)")
    if wrap.channels_last:
        steps.append("out = out.contiguous()")
    body = textwrap.indent("\n".join(steps), " " * 8)
    return f'''
def _recipe_restore(out, dtype):
    """Outputs back in the reference's dtype and layout (tensors, tuples and lists of them)."""
    if isinstance(out, torch.Tensor):
{body}
        return out
    if isinstance(out, tuple):
        return tuple(_recipe_restore(o, dtype) for o in out)
    if isinstance(out, list):
        return [_recipe_restore(o, dtype) for o in out]
    return out
'''


def _helpers(wrap: Wrap) -> list[str]:
    out = []
    if wrap.autocast:
        out += [_HELPER_DEVICE, _HELPER_DTYPE]
    if wrap.channels_last:
        out.append(_HELPER_CHANNELS_LAST)
    if wrap.autocast or wrap.channels_last:
        out.append(_restore_helper(wrap))
    return out


def _run_body(wrap: Wrap) -> list[str]:
    """The statements of `ModelNew._run(self, *args, **kwargs)`."""
    lines = []
    if wrap.channels_last:
        lines.append("args = tuple(_recipe_channels_last(a) for a in args)")
    call = "out = self.model(*args, **kwargs)"
    if wrap.autocast:
        lines += [
            "dtype = _recipe_float_dtype(args)",
            f"with torch.autocast(_recipe_device_type(args), dtype=torch.{wrap.autocast}):",
            f"    {call}",
        ]
    else:
        lines.append(call)
    if wrap.autocast or wrap.channels_last:
        dtype = "dtype" if wrap.autocast else "None"
        lines.append(f"return _recipe_restore(out, {dtype})")
    else:
        lines.append("return out")
    return lines


def _model_new(wrap: Wrap, ref: str, recipes: Sequence[Recipe]) -> str:
    doc = "\n".join(
        [f"Recipes: {', '.join(r.name for r in recipes)}.", ""]
        + [textwrap.fill(f"- {r.name}: {r.description}.", 92, subsequent_indent="  ")
           for r in recipes]
    )
    init = [f"model = {ref}(*args, **kwargs)"]
    if wrap.channels_last:
        init.append("model = model.to(memory_format=torch.channels_last)")
    init.append("self.model = model")
    if wrap.compile_mode == "default":
        init.append("self.compiled = torch.compile(self._run)")
    elif wrap.compile_mode:
        init.append(f"self.compiled = torch.compile(self._run, mode={wrap.compile_mode!r})")
    target = "self.compiled" if wrap.compile_mode else "self._run"
    if wrap.inference_mode:
        forward = ["with torch.inference_mode():", f"    return {target}(*args, **kwargs)"]
    else:
        forward = [f"return {target}(*args, **kwargs)"]

    def block(lines: list[str]) -> str:
        return textwrap.indent("\n".join(lines), " " * 8)

    doc_lines = textwrap.indent(doc, "    ").lstrip()
    return (
        "class ModelNew(torch.nn.Module):\n"
        f'    """{doc_lines}\n    """\n\n'
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__()\n"
        f"{block(init)}\n\n"
        "    def _run(self, *args, **kwargs):\n"
        f"{block(_run_body(wrap))}\n\n"
        "    def forward(self, *args, **kwargs):\n"
        f"{block(forward)}\n"
    )
