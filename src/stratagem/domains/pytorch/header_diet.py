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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

VERSION = 1
"""Part of the cache key of a lightened build: bumped when the rewrite changes."""
LIGHT_HEADER = "torch/types.h"
HEAVY_HEADERS = ("torch/extension.h", "torch/torch.h", "torch/all.h")

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
    for text in cuda_sources:
        hit = _NEEDS_FULL.search(_strip_comments(text))
        if hit is not None:
            return Diet(None, tuple(removed), f"the CUDA source names {hit.group(0).strip()!r}")
    out = [_INCLUDE.sub(_light_line, text) for text in cuda_sources]
    return Diet(out, tuple(removed))


def _light_line(m: re.Match[str]) -> str:
    return f'{m.group("lead")}<{LIGHT_HEADER}>  /* stratagem header diet: was <{m.group("path")}> */{m.group("rest")}'
