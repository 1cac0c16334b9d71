"""Owns the header diet of `load_inline` CUDA sources: `#include <torch/extension.h>` (or
`<torch/torch.h>`, `<torch/all.h>`) in a `.cu` source becomes `#include <torch/types.h>`, so
nvcc parses ATen and torch's tensor factories instead of the whole C++ frontend (nn, optim,
data, jit, serialize) and pybind11 with Python.h. Standard library only; the worker's
`load_inline` wrapper (`worker/inline_builds.py`) applies it and builds the original source
unchanged when the lightened one does not compile.

Why: torch's `load_inline` already starts every `.cu` with `#include <torch/types.h>`, yet
generated candidates add `<torch/extension.h>`, and nvcc then spends most of a build in its
front ends (cudafe++, cicc, the host compile of the result) over headers a kernel file never
uses. The C++ part (`cpp_sources`, where the pybind11 module is defined) is left as written.

What it changes: only which declarations the `.cu` sees. A source that compiles with fewer
declarations calls the same functions, with three exceptions, all of which need a declaration
that lives only in the removed headers (`torch/all.h`'s nn, optim, data, jit, autograd,
serialize, fft, special, linalg, nested, sparse, cuda, utils and `torch/python.h`'s pybind11
and Python.h):

- overload resolution: a call whose best overload is declared only in a removed header and
  another viable overload in a kept one compiles either way and binds differently (no such
  pair is known in torch's headers: the removed ones add their own namespaces,
  `torch::nn::...`, `torch::fft::...`, and free functions of other names);
- a template specialization (or a partial one) declared only in a removed header, which the
  source instantiates;
- preprocessor state: a macro defined by a removed header that the source tests
  (`#ifdef`, `__has_include` does not depend on what was included), and the feature macros of
  Python's `pyconfig.h` (`_GNU_SOURCE`, `_FILE_OFFSET_BITS`), which reach only system headers
  first included after `torch/extension.h`: the prefix `torch/types.h` has included the usual
  ones before.

A source that names pybind11, Python or the frontend's namespaces is not lightened at all (it
would not compile, and the failed attempt costs a compile); whatever else fails to compile
lightened is built unchanged by the wrapper, so the diet never rejects a candidate.
Lightened lines keep their line numbers (error messages point at the user's line).

Lean headers (`lean`, tried before the diet where torch's `load_inline` has
`no_implicit_headers`): even `torch/types.h` is ATen's every operator (`ATen/Functions.h`),
most of a build's front-end time (on this project's 2-core machine, nvcc on a KernelBench ReLU
kernel: 43 s with `torch/types.h`, 19 s lean). The lean prefix declares the tensor API a
kernel file uses: `at::Tensor` with its methods, the tensor operators, `AT_DISPATCH_*`,
`TORCH_CHECK`, device guards, `torch::` as an alias of `at::` with `torch/types.h`'s dtype
constants, and the per-operator header (`ATen/ops/NAME.h`) of each operator the source names
(`torch::NAME`, `at::NAME`, or any name it calls: `empty_like(x)` found by argument-dependent
lookup, or under `using namespace torch`). The
`#include` of a full header in the source (`torch/extension.h`, `torch/types.h`,
`ATen/ATen.h`, ...) becomes a comment on the same line. The C++ part gets the
`#include <torch/extension.h>` torch would have put there. What a lean source sees is a subset
of what the diet's `torch/types.h` declares, so the diet's three caveats apply, and one more:
`torch::empty` and torch's other tensor factories are `at::`'s unless the source names
`requires_grad`, `from_blob` or `torch::tensor` (then torch's autograd factories are included,
as `torch/types.h` has them); the two differ only for tensors that require grad. A lean source
that does not compile is built on the diet, then as written (`worker/inline_builds.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

VERSION = 1
"""Part of the cache key of a lightened build: bumped when the rewrite changes."""
LEAN_VERSION = 1
"""Part of the cache key of a lean build: bumped when the lean prefix's rules change."""
LIGHT_HEADER = "torch/types.h"

_INCLUDE = re.compile(
    r'^(?P<lead>[ \t]*#[ \t]*include[ \t]*)(?P<open>[<"])(?P<path>torch/(?:extension|torch|all)\.h)[>"]'
    r'(?P<rest>[^\n]*)$', re.M)
_NEEDS_FULL = re.compile(
    r"\bpybind11\b|\bPYBIND11_|\bpy::|\bPy_\w+|\bPy[A-Z]\w*?_\w+|\bPy(?:Object|TypeObject)\b|Python\.h"
    r"|\bTORCH_EXTENSION_NAME\b"
    r"|\btorch\s*::\s*(?:nn|optim|data|jit|autograd|serialize|fft|special|linalg|nested|sparse|cuda|mps|xpu"
    r"|python|save|load|manual_seed|NoGradGuard|AutoGradMode|enable_grad|InferenceMode)\b"
    r"|\bnamespace\s+\w+\s*=\s*torch\s*::\s*nn\b")


@dataclass(frozen=True)
class Diet:
    """A call's CUDA sources lightened, or why they were left as written."""

    sources: list[str] | None
    """The lightened sources (same count and line numbers), None when nothing was changed."""
    removed: tuple[str, ...] = ()
    """The heavy headers replaced (`torch/extension.h`, ...)."""
    skipped: str | None = None
    """Why sources that include a heavy header were left as written (they need it)."""


def _strip_comments(text: str) -> str:
    """The text without `//` and `/* */` comments (string literals are not parsed: a comment
    marker inside one only makes the check below more cautious)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def lighten(cuda_sources: Sequence[str]) -> Diet:
    """Replace the heavy torch headers of `cuda_sources` by `torch/types.h`, unless a source
    names what only they declare (`_NEEDS_FULL`)."""
    removed: list[str] = []
    for text in cuda_sources:
        removed += [m.group("path") for m in _INCLUDE.finditer(text)]
    if not removed:
        return Diet(None)
    why = _needs_full(_strip_comments(t) for t in cuda_sources)
    if why is not None:
        return Diet(None, tuple(removed), why)
    out = [_INCLUDE.sub(_light_line, text) for text in cuda_sources]
    return Diet(out, tuple(removed))


_FULL_INCLUDE = re.compile(
    r'^(?P<lead>[ \t]*#[ \t]*include[ \t]*)(?P<open>[<"])(?P<path>torch/(?:extension|torch|all|types)\.h|ATen/ATen\.h)'
    r'[>"](?P<rest>[^\n]*)$', re.M)
_NAMED = re.compile(r"\b(?:torch|at)\s*::\s*(\w+)\b(?!\s*::)")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_FACTORIES = re.compile(r"\brequires_grad\b|\bfrom_blob\b|\btorch\s*::\s*tensor\b")
_DTYPES = ("kUInt8 = at::kByte", "kInt8 = at::kChar", "kInt16 = at::kShort", "kInt32 = at::kInt",
           "kInt64 = at::kLong", "kUInt16 = at::kUInt16", "kUInt32 = at::kUInt32", "kUInt64 = at::kUInt64",
           "kFloat16 = at::kHalf", "kFloat32 = at::kFloat", "kFloat64 = at::kDouble", "kU8 = kUInt8",
           "kU16 = kUInt16", "kU32 = kUInt32", "kU64 = kUInt64", "kI8 = kInt8", "kI16 = kInt16", "kI32 = kInt32",
           "kI64 = kInt64", "kF16 = kFloat16", "kF32 = kFloat32", "kF64 = kFloat64")
LEAN_MARK = "stratagem lean headers"


@dataclass(frozen=True)
class Lean:
    """A call's sources with the lean prefix, or why they were left alone."""

    cuda_sources: list[str] | None
    """The CUDA sources, the first starting with the lean prefix (None: not lean)."""
    cpp_sources: list[str] | None = None
    """The C++ sources with the `torch/extension.h` include torch would have added."""
    operators: tuple[str, ...] = ()
    """The per-operator headers included (`empty_like`, ...)."""
    skipped: str | None = None


def lean(cuda_sources: Sequence[str], cpp_sources: Sequence[str], has_operator: Callable[[str], bool]) -> Lean:
    """`cuda_sources` and `cpp_sources` as `load_inline(..., no_implicit_headers=True)` should
    get them to build with the lean prefix instead of `torch/types.h` (`has_operator(name)`:
    whether torch's include folder has `ATen/ops/{name}.h`)."""
    if not cuda_sources:
        return Lean(None)
    texts = [_strip_comments(t) for t in cuda_sources]
    why = _needs_full(texts)
    if why is not None:
        return Lean(None, skipped=why)
    names: set[str] = set()
    for text in texts:  # qualified names, and every called name: a call found by ADL on a Tensor too
        names.update(_NAMED.findall(text))
        names.update(_CALLED.findall(text))
    ops = tuple(sorted(n for n in names if has_operator(n)))
    joined = "\n".join(texts)
    lines = ["// " + LEAN_MARK + ": torch/types.h's tensor API without every ATen operator (header_diet.py)",
             "#ifndef AT_PER_OPERATOR_HEADERS", "#define AT_PER_OPERATOR_HEADERS", "#endif", "#include <ATen/core/Tensor.h>", "#include <ATen/TensorOperators.h>",
             "#include <ATen/Dispatch.h>", "#include <ATen/DeviceGuard.h>", "#include <c10/util/Exception.h>",
             "#include <optional>"]
    if re.search(r"\bglobalContext\b|\bat\s*::\s*Context\b", joined):
        lines.append("#include <ATen/Context.h>")
    if _FACTORIES.search(joined):
        lines.append("#include <torch/csrc/autograd/generated/variable_factories.h>")
    lines += [f"#include <ATen/ops/{n}.h>" for n in ops]
    lines += ["#include <cuda.h>", "#include <cuda_runtime.h>",
              "namespace torch { using namespace at; using std::nullopt; using std::optional; "
              "using Dtype = at::ScalarType; " + " ".join(f"inline constexpr auto {d};" for d in _DTYPES) + " }"]
    out = [_FULL_INCLUDE.sub(_lean_line, t) for t in cuda_sources]
    return Lean(["\n".join(lines), *out], ["#include <torch/extension.h>", *cpp_sources], ops)


def _lean_line(m: re.Match[str]) -> str:
    return f'/* {LEAN_MARK}: #include <{m.group("path")}> */{m.group("rest")}'


def _needs_full(texts: Iterable[str]) -> str | None:
    """Why sources (comments stripped) need the full headers (`_NEEDS_FULL`), or None."""
    for text in texts:
        hit = _NEEDS_FULL.search(text)
        if hit is not None:
            return f"the CUDA source names {hit.group(0).strip()!r}"
    return None


def _light_line(m: re.Match[str]) -> str:
    return f'{m.group("lead")}<{LIGHT_HEADER}>  /* stratagem header diet: was <{m.group("path")}> */{m.group("rest")}'
