"""Owns the split build of `load_inline` CUDA sources: the `.cu` is cut into a kernel unit that
nvcc compiles without torch's headers (the kernels, the device functions and launch stubs) and
host code that joins the C++ part (`main.cpp`), which gcc compiles against torch's precompiled
`torch/extension.h`. Standard library only; the worker's `load_inline` wrapper
(`worker/inline_builds.py`) tries it before lean headers and builds the lighter attempts when
it does not compile.

Why: nvcc's front ends (cudafe++, cicc) parse every header a `.cu` includes, and even lean
headers are torch's whole Tensor class; on the H200's machine they were 16 of a lean build's
20 s while the kernel itself (ptxas) took 0.07 s. Host code is the only part that needs torch,
and gcc reads torch's headers from the precompiled header torch keeps for `main.cpp`.

What moves where, reading the `.cu`'s top-level items in order (both units keep the order):

- the kernel unit: `__global__` and `__device__` functions, `__constant__`/`__device__`/
  `__shared__` variables, and at its end one launch stub per launched kernel
  (`void stratagem_launch_K(dim3, dim3, size_t, cudaStream_t, <K's parameters>)`);
- the host unit (after the C++ part as written): every other function, host variables,
  `#include`s of torch, ATen, c10 and pybind11, and each stub's declaration where its kernel was;
- both: other `#include`s and preprocessor lines, types (struct, class, union, enum, typedef,
  using), constants, `__host__ __device__` functions, declarations of functions.

In host code, `K<<<grid, block[, shmem[, stream]]>>>(args)` becomes
`stratagem_launch_K(grid, block, shmem, stream, args)`: the same arguments, evaluated once, the
same launch. A kernel launched with explicit template arguments (`K<256><<<...>>>`) gets a
stub of its own for those arguments, which must then name only numbers, built-in types and
what both units declare; one launched with `scalar_t` inside `AT_DISPATCH_*` gets a template
stub, declared on the host and explicitly instantiated in the kernel unit for each type the
macro dispatches to; one launched inside a host function template with its parameters, for
each explicit call of that template (`launch<3>(...)`); a host function's own constant
(`constexpr int BLOCK = 256;`) stands for its value. A missing instance cannot pass unseen:
the library then does not import, and the wrapper builds the lighter attempt.

A source is not split (`Split.skipped` says why, and the lighter attempts build it) when:
device code names torch (`torch::`, `at::`, `c10::`, `AT_`, `TORCH_`, `C10_`); host code names a
device symbol other than by launching it (`cudaFuncSetAttribute(K, ...)`, `cudaMemcpyToSymbol`);
a kernel is launched with template arguments deduced or named by host code otherwise (a host
template called with deduced arguments, a dispatch macro not listed in `_DISPATCH_TYPES`), is
overloaded, is not defined in the source, or has an unnamed parameter; a
macro launches a kernel; or the `.cu` has a namespace or `extern "C" { }` block. Host code is
compiled by gcc as C++ without `__CUDACC__` (a host branch under `#ifdef __CUDACC__` differs);
a `.cu` host optimization level (`-O3` in `extra_cuda_cflags`) is kept for the moved code with
`#pragma GCC optimize`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from stratagem.domains.pytorch.static import cuda_text as ct

VERSION = 1
"""Part of the cache key of a split build: a change to the split changes it."""
STUB_PREFIX = "stratagem_launch_"
MARK = "stratagem split build"

_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"]\s*(?:torch|ATen|c10|pybind11|THC|caffe2)/')
_TORCH_NAME = re.compile(r"\b(?:torch|at|c10)\s*::|\b(?:AT|TORCH|C10)_[A-Z_0-9]+\b")
_DEVICE_WORD = re.compile(r"\b(?:__global__|__device__|__constant__|__shared__|__managed__)\b")
_HOST_WORD = re.compile(r"\b__host__\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"\d[\w.']*")
_OPT = re.compile(r"^-O(\d|s|fast)?$")
_BUILTIN = frozenset(
    "void bool char short int long float double signed unsigned const volatile true false sizeof "
    "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t half __half "
    "__nv_bfloat16 float2 float4 int2 int4 half2 __half2".split())
_KEYWORDS = _BUILTIN | frozenset(
    "struct class union enum typename template static inline constexpr extern auto return if else "
    "for while do switch case default break continue __restrict__ __restrict restrict".split())


@dataclass(frozen=True)
class Split:
    """The call's sources for a split build, or None with why it is not split."""

    cuda_sources: list[str] | None
    cpp_sources: list[str] | None
    skipped: str | None = None


@dataclass(frozen=True)
class _Kernel:
    name: str
    params: str  # the parameter list as written
    names: list[str]  # the parameters' names
    template: str | None  # "template <typename T, int B>" or None
    template_names: list[str]


def split(cuda_sources: Sequence[str], cpp_sources: Sequence[str], cuda_flags: Sequence[str] = (),
          cpp_flags: Sequence[str] = ()) -> Split:
    """The kernel unit (as the call's `cuda_sources`) and the host unit (as its `cpp_sources`,
    `#include <torch/extension.h>` first, for torch's precompiled header), or why not."""
    try:
        return _split("\n".join(cuda_sources), list(cpp_sources), list(cuda_flags), list(cpp_flags))
    except ct.NotSplit as e:
        return Split(None, None, str(e))


def _split(text: str, cpp: list[str], cuda_flags: list[str], cpp_flags: list[str]) -> Split:
    items = ct.items(text)
    if not any(it.kind != "pp" and "__global__" in it.code for it in items):
        raise ct.NotSplit("no kernel in the CUDA source")
    places = [_place(it) for it in items]
    kernels, device_names = _device_side(items, places)
    shared_names = _names_declared_by([it for it, where in zip(items, places, strict=True) if where == "both"])
    launched: dict[str, set[str]] = {}  # kernel -> the explicit template argument lists it is launched with
    dispatched: dict[str, set[str]] = {}  # kernel -> the instances its template stub needs
    host_code = "\n".join(it.code for it, where in zip(items, places, strict=True) if where == "host")
    host_texts = [_host_text(it, kernels, launched, shared_names, device_names, dispatched, host_code)
                  if where == "host" else "" for it, where in zip(items, places, strict=True)]
    if not launched and not dispatched:
        raise ct.NotSplit("the host code launches no kernel of the source")
    kernel_unit = ["// " + MARK + ": the kernels", "#include <cuda_runtime.h>", "#include <cstdint>",
                   "#include <cmath>", "#include <cfloat>", "#include <climits>"]
    if "std::" in "".join(it.code for it, w in zip(items, places, strict=True) if w == "device"):
        kernel_unit.append("#include <algorithm>")
    wanted = {t for types in dispatched.values() for t in types}
    kernel_unit += [f"#include <c10/util/{t[5:]}.h>" for t in ("c10::Half", "c10::BFloat16") if t in wanted]
    host_unit = ["// " + MARK + ": the host code", "#include <cuda_runtime.h>", *cpp]
    host_opt = _host_opt(cuda_flags)
    pragma = host_opt is not None and host_opt != (_host_opt(cpp_flags) or "0")
    if pragma:  # for the moved code only: torch's pybind11 module after it keeps main.cpp's level
        host_unit += ["#pragma GCC push_options", f'#pragma GCC optimize ("O{host_opt}")']
    for it, where, host_text in zip(items, places, host_texts, strict=True):
        if where in ("device", "both"):
            kernel_unit.append(it.text)
        if where == "both":
            host_unit.append(it.text)
        elif where == "host":
            host_unit.append(host_text)
        elif it.kind == "body" and (k := _kernel_of(it, kernels)) is not None:
            host_unit.extend(_stub_declaration(k, targs) for targs in sorted(launched.get(k.name, ())))
            if k.name in dispatched:
                host_unit.append(_template_stub(k, body=False))
    if pragma:
        host_unit.append("#pragma GCC pop_options")
    kernel_unit.extend(_stub_definition(kernels[name], targs)
                       for name, arg_lists in launched.items() for targs in sorted(arg_lists))
    for name, types in dispatched.items():
        k = kernels[name]
        kernel_unit.append(_template_stub(k, body=True))
        kernel_unit.extend(f"template void {STUB_PREFIX}{name}<{t}>({_stub_params_text(k, t)});" for t in sorted(types))
    # torch's precompiled header is read only where its include comes first, as torch puts it
    return Split(["\n".join(kernel_unit) + "\n"], ["#include <torch/extension.h>", "\n".join(host_unit) + "\n"])


def _device_side(items: list[ct.Item], places: list[str]) -> tuple[dict[str, _Kernel], set[str]]:
    """The kernels the source defines, and every name its device-only items declare."""
    kernels: dict[str, _Kernel] = {}
    names: set[str] = set()
    for it, where in zip(items, places, strict=True):
        if where != "device":
            continue
        if m := _TORCH_NAME.search(it.code):
            raise ct.NotSplit(f"device code names torch ({m.group(0).strip()})")
        name = ct.declared_name(it)
        if name is None:
            continue
        names.add(name)
        if "__global__" in it.code and it.kind == "body":
            if name in kernels:
                raise ct.NotSplit(f"kernel {name} is defined twice (overloaded)")
            kernels[name] = _kernel(it, name)
    return kernels, names


def _host_text(it: ct.Item, kernels: dict[str, _Kernel], launched: dict[str, set[str]], shared: set[str],
               device_names: set[str], dispatched: dict[str, set[str]], host_code: str) -> str:
    """A host item with its launches rewritten; it may name no device symbol otherwise."""
    rewritten = _rewrite_launches(it.text, kernels, launched, shared, dispatched, host_code)
    code = ct.blank(rewritten)
    for name in device_names:
        if re.search(rf"\b{re.escape(name)}\b", code):
            raise ct.NotSplit(f"host code uses the device symbol {name} other than by launching it")
    return rewritten


def _kernel_of(it: ct.Item, kernels: dict[str, _Kernel]) -> _Kernel | None:
    name = ct.declared_name(it)
    return kernels.get(name) if name is not None and "__global__" in it.code else None


def _host_opt(flags: Sequence[str]) -> str | None:
    """The host optimization level the flags ask for (`-O3`, `-Xcompiler -O2`), the last one."""
    level: str | None = None
    for f in flags:
        for part in re.split(r"[\s,]+", f):
            if m := _OPT.match(part.strip("'\"")):
                level = m.group(1) or "1"
    return level

# --- reading the source's top level ---------------------------------------------------------

# --- classifying ----------------------------------------------------------------------------


def _place(it: ct.Item) -> str:
    """Where an item goes: "device", "host" or "both"."""
    code = it.code.strip()
    if it.kind == "pp":
        return "host" if _TORCH_INCLUDE.match(it.text.strip()) else "both"
    head = code[:code.find("{")] if it.kind == "body" and "{" in code else code
    bare = ct.drop_template_prefix(head.strip())
    if _DEVICE_WORD.search(head) and not _HOST_WORD.search(head):
        if ct.TYPE_HEAD.match(bare):
            return "both"  # a type declared with __align__-style words: both see it
        return "device"
    if _HOST_WORD.search(head) and _DEVICE_WORD.search(head):
        return "both"
    if ct.TYPE_HEAD.match(bare):
        return "both"
    if it.kind == "decl":
        if "(" not in bare or re.match(r"(?:static\s+)?(?:inline\s+)?(?:const|constexpr)\b", bare) and "=" in bare:
            # a variable: constants go to both, other host variables stay on the host
            return "both" if re.search(r"\b(?:const|constexpr)\b", bare) else "host"
        return "host"  # a function's declaration (host functions; device ones matched above)
    if re.match(r"(?:static\s+)?(?:inline\s+)?(?:const|constexpr)\b", bare) and "=" in bare:
        return "both"  # a constant with a braced initializer
    return "host"


def _kernel(it: ct.Item, name: str) -> _Kernel:
    head_code = it.code[:it.code.find("{")]
    head_text = it.text[:len(head_code)]
    k = ct.last_group_open(head_code)
    assert k is not None
    end = head_code.rfind(")")
    params = head_text[k + 1:end].strip()
    names = []
    for p in ct.top_level_split(ct.blank(params)):
        if not p.strip() or p.strip() == "void":
            continue
        if "..." in p:
            raise ct.NotSplit(f"kernel {name} takes a parameter pack")
        decl = re.split(r"=", p)[0]
        decl = re.sub(r"\[[^\]]*\]", "", decl)
        idents = [x for x in _IDENT.findall(decl) if x not in ("const", "volatile", "__restrict__", "__restrict")]
        if len(idents) < 2 or idents[-1] in _KEYWORDS:
            raise ct.NotSplit(f"kernel {name} has an unnamed parameter")
        names.append(idents[-1])
    template: str | None = None
    template_names: list[str] = []
    stripped = head_code.strip()
    if stripped.startswith("template"):
        lt = stripped.find("<")
        gt = ct.match_angle(stripped, lt)
        if gt is None:
            raise ct.NotSplit(f"kernel {name}'s template header is not read")
        inner = stripped[lt + 1:gt]
        template = f"template <{inner}>"
        for p in ct.top_level_split(inner):
            decl = p.split("=")[0]
            if "..." in decl:
                raise ct.NotSplit(f"kernel {name} has a template parameter pack")
            ids = _IDENT.findall(decl)
            if len(ids) < 2:
                raise ct.NotSplit(f"kernel {name} has an unnamed template parameter")
            template_names.append(ids[-1])
    return _Kernel(name, params, names, template, template_names)


def _names_declared_by(items: list[ct.Item]) -> set[str]:
    names: set[str] = set()
    for it in items:
        if it.kind == "pp":
            if m := re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", it.code):
                names.add(m.group(1))
            continue
        if (name := ct.declared_name(it)) is not None:
            names.add(name)
        for m in re.finditer(r"\b(?:struct|class|union|enum(?:\s+class)?)\s+([A-Za-z_]\w*)", it.code):
            names.add(m.group(1))
        if m := re.match(r"\s*using\s+([A-Za-z_]\w*)\s*=", it.code):
            names.add(m.group(1))
    return names

# --- launches and stubs ---------------------------------------------------------------------


def _rewrite_launches(text: str, kernels: dict[str, _Kernel], launched: dict[str, set[str]],
                      shared: set[str], dispatched: dict[str, set[str]], host_code: str) -> str:
    """Host code with each `K[<args>]<<<config>>>(args)` a call of K's stub (`dispatched`: the
    template arguments a kernel launched with the host's own (`scalar_t` in `AT_DISPATCH_*`, a
    host template's parameters) is instantiated for; `host_code`: all host code, blanked)."""
    out: list[str] = []
    pos = 0
    code = ct.blank(text)
    for m in re.finditer(r"<<<", code):
        if m.start() < pos:
            continue
        name, begin, targs, types = _launched_kernel(text, code, m.start(), kernels, shared, host_code)
        close = code.find(">>>", m.end())
        if close == -1:
            raise ct.NotSplit("a launch's configuration is not closed")
        config = [c.strip() for c in ct.split_like(text[m.end():close], code[m.end():close])]
        if not 2 <= len(config) <= 4:
            raise ct.NotSplit(f"the launch of {name} has {len(config)} configuration values")
        config += ["0"] * (4 - len(config))
        a = close + 3
        while a < len(code) and code[a].isspace():
            a += 1
        b = ct.closing(code, a) if a < len(code) and code[a] == "(" else None
        if b is None:
            raise ct.NotSplit(f"the launch of {name} has no argument list")
        args = text[a + 1:b].strip()
        if types is not None:  # a template stub, instantiated for the dispatched types
            dispatched.setdefault(name, set()).update(types)
            stub = f"{STUB_PREFIX}{name}<{targs}>"
        else:
            launched.setdefault(name, set()).add(targs or "")
            stub = _stub_name(name, targs or "")
        out += [text[pos:begin], f"{stub}({', '.join(config)}{', ' if args else ''}{args})"]
        pos = b + 1
    out.append(text[pos:])
    return "".join(out)


def _launched_kernel(text: str, code: str, at: int, kernels: dict[str, _Kernel], shared: set[str],
                     host_code: str = "") -> tuple[str, int, str | None, tuple[str, ...] | None]:
    """The kernel a `<<<` at `at` launches: its name, where the name begins, the explicit
    template arguments (None: none), which the kernel unit must be able to instantiate, and,
    for a launch with `scalar_t` inside `AT_DISPATCH_*`, the types it dispatches to."""
    j = len(code[:at].rstrip())
    targs: str | None = None
    if code[j - 1] == ">":
        k = ct.opening_angle(code, j - 1)
        if k is None:
            raise ct.NotSplit("a launch's template arguments are not read")
        targs = text[k + 1:j - 1].strip()
        j = len(code[:k].rstrip())
    nm = re.search(r"([A-Za-z_]\w*)\s*$", code[:j])
    if nm is None:
        raise ct.NotSplit("a launch names no kernel")
    name = nm.group(1)
    if code[:nm.start(1)].rstrip().endswith("::"):
        raise ct.NotSplit(f"the kernel {name} is launched by a qualified name")
    kernel = kernels.get(name)
    if kernel is None:
        raise ct.NotSplit(f"the launched kernel {name} is not defined in the source")
    if kernel.template is None and targs is not None:
        raise ct.NotSplit(f"the kernel {name} is launched with template arguments it does not take")
    if kernel.template is not None:
        if targs is None:
            raise ct.NotSplit(f"the template kernel {name} is launched with deduced template arguments")
        targs = _with_local_constants(targs, code[:at], shared)
        unknown = [x for x in _IDENT.findall(ct.blank(targs)) if x not in _BUILTIN and x not in shared]
        if unknown == ["scalar_t"] and targs.strip() == "scalar_t" and len(kernel.template_names) == 1:
            types = _dispatched_types(code, at)
            if types is not None:
                return name, nm.start(1), targs, types
        if unknown and (instances := _host_template_instances(code, targs, host_code, shared)) is not None:
            return name, nm.start(1), targs, instances
        if unknown:
            raise ct.NotSplit(f"the template kernel {name} is launched with {unknown[0]}, which the kernel "
                            "unit does not know")
    return name, nm.start(1), targs, None


def _known(expr: str, shared: set[str]) -> bool:
    """Whether the kernel unit can evaluate `expr`: numbers, built-in names and shared names."""
    return all(x in _BUILTIN or x in shared for x in _IDENT.findall(_NUMBER.sub(" ", expr)))


def _with_local_constants(targs: str, before: str, shared: set[str]) -> str:
    """Template arguments with the host function's own constants (`constexpr int BLOCK = 256;`
    earlier in it) replaced by their values, where the kernel unit can evaluate those."""
    for x in set(_IDENT.findall(_NUMBER.sub(" ", targs))) - _BUILTIN - shared:
        found = re.findall(rf"\b(?:constexpr|const)\s+(?:unsigned\s+|signed\s+)?[A-Za-z_][\w:]*\s+{re.escape(x)}"
                           rf"\s*=\s*([^;{{}}]+);", before)
        if found and _known(found[-1], shared):
            targs = re.sub(rf"\b{re.escape(x)}\b", f"({found[-1].strip()})", targs)
    return targs


def _host_template_instances(code: str, targs: str, host_code: str, shared: set[str]) -> tuple[str, ...] | None:
    """The template arguments a launch inside a host function template gets, one per explicit
    call of that template in the host code (`launch<3>(...)`, `launch<5>(...)`), or None when
    they cannot all be known (a parameter not the template's, a call with deduced arguments)."""
    stripped = code.lstrip()
    if not stripped.startswith("template"):
        return None
    lt = stripped.find("<")
    gt = ct.match_angle(stripped, lt)
    if gt is None:
        return None
    params = [(_IDENT.findall(p.split("=")[0]) or [""])[-1] for p in ct.top_level_split(stripped[lt + 1:gt])]
    unknown = set(_IDENT.findall(_NUMBER.sub(" ", targs))) - _BUILTIN - shared
    head = stripped[gt + 1:stripped.find("{")] if "{" in stripped else ""
    k = ct.last_group_open(head)
    fn = re.search(r"([A-Za-z_]\w*)\s*$", head[:k]) if k is not None else None
    if not unknown <= set(params) or fn is None:
        return None
    elsewhere = host_code.replace(code, "")
    if re.search(rf"\b{re.escape(fn.group(1))}\s*\(", elsewhere) or re.search(
            rf"&\s*{re.escape(fn.group(1))}\b", elsewhere):
        return None  # called with deduced arguments, or its address taken: the instances are not all visible
    out: list[str] = []
    for m in re.finditer(rf"\b{re.escape(fn.group(1))}\s*<", elsewhere):
        end = ct.match_angle(elsewhere, m.end() - 1)
        if end is None:
            return None
        given = [a.strip() for a in ct.top_level_split(elsewhere[m.end():end])]
        if len(given) != len(params) or not all(_known(a, shared) for a in given):
            return None
        concrete = targs
        for name, value in zip(params, given, strict=True):
            concrete = re.sub(rf"\b{re.escape(name)}\b", f"({value})" if not value.isidentifier() else value,
                              concrete)
        out.append(concrete)
    return tuple(dict.fromkeys(out)) or None


_DISPATCH = re.compile(r"\bAT_DISPATCH_(\w+)\s*\(")
_DISPATCH_TYPES = {
    "FLOATING_TYPES": ("double", "float"),
    "FLOATING_TYPES_AND_HALF": ("double", "float", "c10::Half"),
    "REDUCED_FLOATING_TYPES": ("c10::Half", "c10::BFloat16"),
    "INTEGRAL_TYPES": ("uint8_t", "int8_t", "int32_t", "int64_t", "int16_t"),
    "ALL_TYPES": ("uint8_t", "int8_t", "int32_t", "int64_t", "int16_t", "double", "float"),
}
"""The types of c10's dispatch macros (c10/core/ScalarType.h's AT_FORALL lists), as the kernel
unit names them; `..._AND(T, ...)`, `_AND2`, `_AND3` add the scalar types named first."""
_SCALAR_TYPES = {"Half": "c10::Half", "BFloat16": "c10::BFloat16", "Float": "float", "Double": "double",
                 "Int": "int32_t", "Long": "int64_t", "Short": "int16_t", "Char": "int8_t", "Byte": "uint8_t",
                 "Bool": "bool"}


def _dispatched_types(code: str, at: int) -> tuple[str, ...] | None:
    """The types of the innermost `AT_DISPATCH_*(...)` around position `at` (None: none, or a
    macro or an added scalar type not known here)."""
    around = [(m, ct.closing(code, m.end() - 1)) for m in _DISPATCH.finditer(code[:at])]
    inside = [(m, end) for m, end in around if end is not None and end > at]
    if not inside:
        return None
    m, end = inside[-1]
    kind = m.group(1)
    added = re.fullmatch(r"(\w+?)_AND([23]?)", kind)
    base, extra = (added.group(1), int(added.group(2) or 1)) if added and kind not in _DISPATCH_TYPES else (kind, 0)
    if base not in _DISPATCH_TYPES:
        return None
    types = list(_DISPATCH_TYPES[base])
    for arg in ct.top_level_split(code[m.end():end], angles=False)[:extra]:
        scalar = re.search(r"(?:k|ScalarType::)(\w+)\s*$", arg.strip())
        if scalar is None or scalar.group(1) not in _SCALAR_TYPES:
            return None
        types.append(_SCALAR_TYPES[scalar.group(1)])
    return tuple(dict.fromkeys(types))


def _stub_name(name: str, targs: str) -> str:
    """The stub of kernel `name` launched with template arguments `targs` ("" for none)."""
    if not targs:
        return STUB_PREFIX + name
    return f"{STUB_PREFIX}{name}_{hashlib.sha1(' '.join(targs.split()).encode()).hexdigest()[:10]}"


def _stub_params_text(k: _Kernel, targs: str) -> str:
    """The stub's parameters: the launch configuration, then the kernel's, with its template
    parameters replaced by the launch's arguments."""
    params = k.params
    if k.template is not None:
        given = [a.strip() for a in ct.top_level_split(targs)]
        if len(given) != len(k.template_names):
            raise ct.NotSplit(f"the template kernel {k.name} is launched with {len(given)} of its "
                            f"{len(k.template_names)} template arguments")
        for tname, value in zip(k.template_names, given, strict=True):
            params = re.sub(rf"\b{re.escape(tname)}\b", value, params)
    return ("dim3 stratagem_grid, dim3 stratagem_block, size_t stratagem_shmem, cudaStream_t stratagem_stream"
            + (f", {params}" if k.names else ""))


def _template_stub(k: _Kernel, body: bool) -> str:
    """The template stub of a kernel launched with the host's own template arguments: declared
    on the host, defined (and instantiated for each instance) in the kernel unit."""
    head = f"{k.template}\nvoid {STUB_PREFIX}{k.name}({_stub_params_text(k, ', '.join(k.template_names))})"
    if not body:
        return head + ";"
    return (f"{head} {{\n  {k.name}<{', '.join(k.template_names)}><<<stratagem_grid, stratagem_block, "
            f"stratagem_shmem, stratagem_stream>>>({', '.join(k.names)});\n}}")


def _stub_declaration(k: _Kernel, targs: str) -> str:
    return f"void {_stub_name(k.name, targs)}({_stub_params_text(k, targs)});"


def _stub_definition(k: _Kernel, targs: str) -> str:
    call = f"{k.name}<{targs}>" if k.template is not None else k.name
    return (f"void {_stub_name(k.name, targs)}({_stub_params_text(k, targs)}) {{\n"
            f"  {call}<<<stratagem_grid, stratagem_block, stratagem_shmem, stratagem_stream>>>"
            f"({', '.join(k.names)});\n}}")
