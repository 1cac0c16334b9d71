"""Owns seeing the precision a program's operators ran at, on this device: the reference's and
a design's, and whether the design computed below the reference (a precision downgrade).

Worker-side only. A call is watched by a torch function mode (not a dispatch mode: the first
operator under a `TorchDispatchMode` imports torch._dynamo, 3 s on an H200, and a dispatch
mode stops torch.compile from compiling at all) that records, per operator family
(convolutions, matmuls, everything else), the lowest precision it computed at: a dtype, or
below it where torch's flags or autocast round (TF32 convolutions and matmuls on a GPU, bf16
matmuls under `float32_matmul_precision = "medium"`, fp16/bf16 under autocast, reduced
precision reductions). A design is watched too, with what it launches beside torch's
operators: each Triton kernel's floating inputs and what its source computes in (casts to
fp16/bf16, `tl.dot` in TF32, Triton's default for float32); its own native extensions are
named as opaque (what they compute in inside cannot be seen). A compiled design is watched
with torch.compile's stance `force_eager` (its own operators, which the compiled code runs at
the same precision; no recompile), in a call of its own before the correctness trials.

`downgrade` compares the two records; `Evidence` says what decides how far from float64 a
design may be (docs/correctness.md): below the reference is a downgrade whatever its error;
seen at the reference's precision or higher, the error that precision predicts; unseen, the
strict factor.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from stratagem.domains.pytorch.precisions import level

CONV_OPS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                      "conv_transpose2d", "conv_transpose3d", "conv_tbc",
                      # cuDNN's recurrent layers round like its convolutions (cudnn.allow_tf32)
                      "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell"})
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "__matmul__", "__rmatmul__", "linear", "bilinear",
                        "addbmm", "addmv", "mv", "dot", "einsum", "tensordot", "scaled_dot_product_attention",
                        "multi_head_attention_forward", "chain_matmul", "multi_dot"})
"""The functions (as a torch function mode sees them: `torch.*`, `torch.nn.functional.*`, tensor
methods) by family; a module's forward reaches them (nn.Conv2d -> conv2d, nn.Linear -> linear)."""

FAMILY_WORDS = {"conv": "convolutions", "matmul": "matmuls", "other": "other operators",
                "kernel": "its own Triton kernels"}

_TRITON_LOW = re.compile(r"\btl\.(float16|bfloat16|float8\w*)\b")
_TRITON_DOT = re.compile(r"\btl\.dot\s*\(")
_IEEE = re.compile(r"input_precision\s*=\s*['\"]ieee['\"]|allow_tf32\s*=\s*False")


def _label(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return "float8" if name.startswith("float8") else name


def flags() -> dict[str, Any]:
    """torch's process-wide precision flags, as they are now."""
    matmul = torch.backends.cuda.matmul
    return {
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda.matmul.allow_tf32": bool(matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction),
    }


def op_precision(family: str, dtype: torch.dtype, device: str, f: Mapping[str, Any]) -> str | None:
    """The reduced precision an op of `family` ("conv", "matmul") on `dtype` runs at on `device`
    under flags `f`, or None when it runs at its dtype's own precision."""
    gpu = device.startswith("cuda")
    if dtype == torch.float32 and gpu:
        if family == "conv" and f["cudnn.allow_tf32"]:
            return "tf32 (torch.backends.cudnn.allow_tf32)"
        if family == "matmul":
            if f["float32_matmul_precision"] == "medium":
                return "bf16 (float32_matmul_precision 'medium')"
            if f["cuda.matmul.allow_tf32"] or f["float32_matmul_precision"] == "high":
                return "tf32 (torch.backends.cuda.matmul.allow_tf32)"
    if dtype == torch.float32 and family == "matmul" and f["float32_matmul_precision"] == "medium":
        return "bf16 (float32_matmul_precision 'medium')"
    if gpu and family == "matmul" and dtype == torch.float16 and f["cuda.matmul.allow_fp16_reduced_precision_reduction"]:
        return "fp16 with reduced-precision reductions"
    if gpu and family == "matmul" and dtype == torch.bfloat16 and f["cuda.matmul.allow_bf16_reduced_precision_reduction"]:
        return "bf16 with reduced-precision reductions"
    return None


def _how_level(how: str) -> str:
    """`op_precision`'s words as a `LEVELS` label."""
    head = how.split()[0]
    return {"fp16": "float16", "bf16": "bfloat16"}.get(head, head)


def _autocast(device_type: str) -> torch.dtype | None:
    """The dtype autocast runs its lower-precision operators in on `device_type`, or None."""
    try:
        on = torch.is_autocast_enabled(device_type)
        return torch.get_autocast_dtype(device_type) if on else None
    except (TypeError, RuntimeError, AttributeError):  # an older torch: the CUDA form only
        if device_type == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        return None


def triton_precision(source: str, arg_dtypes: list[torch.dtype]) -> tuple[str, str]:
    """A Triton kernel's lowest precision (a `LEVELS` label) and why: its floating inputs'
    dtypes, the low dtypes its source casts to, and `tl.dot` without `input_precision="ieee"`
    (TF32 on float32 operands, Triton's default)."""
    found: list[tuple[str, str]] = [(_label(d), f"a {_label(d)} input") for d in arg_dtypes]
    found += [("float8" if m.startswith("float8") else m, f"tl.{m} in its source") for m in _TRITON_LOW.findall(source)]
    if _TRITON_DOT.search(source) and not _IEEE.search(source):
        found.append(("tf32", "tl.dot without input_precision='ieee' (TF32 on float32, Triton's default)"))
    if not found:
        return "float32", "no floating input"
    return min(found, key=lambda f: level(f[0]))


@dataclass
class RanPrecision:
    """What one program's watched call computed in."""

    device: str
    flags: dict[str, Any] = field(default_factory=dict)
    dtypes: list[str] = field(default_factory=list)
    """The floating dtypes of the operators' inputs and outputs."""
    reduced: dict[str, str] = field(default_factory=dict)
    """Op family ("conv", "matmul") -> the precision below its dtype it ran at, in words."""
    ops: dict[str, int] = field(default_factory=dict)
    """Op family -> operators counted (and "kernel": Triton launches)."""
    lowest: dict[str, str] = field(default_factory=dict)
    """Family ("conv", "matmul", "other", "kernel") -> the lowest precision (`LEVELS`) it ran at."""
    why: dict[str, str] = field(default_factory=dict)
    """Family -> what showed its lowest precision (an operator, autocast, a kernel)."""
    opaque: list[str] = field(default_factory=list)
    """The program's own native extensions: what they compute in cannot be seen."""

    def summary(self) -> str:
        """One line: `float32 (exact: ...)`, `float32, with convolutions in tf32 (...)`, ..."""
        base = " and ".join(self.dtypes) or "no floating operator"
        parts = [f"{FAMILY_WORDS.get(fam, fam)} in {how}" for fam, how in sorted(self.reduced.items())]
        if self.ops.get("kernel"):
            parts.append(f"its own Triton kernels at {self.lowest.get('kernel', 'float32')} ({self.why.get('kernel')})")
        text = f"{base}, with " + ", ".join(parts) if parts else f"{base} (exact: no operator below its dtype)"
        if self.opaque:
            text += f"; its own native code ({', '.join(self.opaque)}) unseen"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "summary": self.summary(), "reduced": dict(self.reduced),
                "dtypes": list(self.dtypes), "ops": dict(self.ops), "flags": dict(self.flags),
                "lowest": dict(self.lowest), "why": dict(self.why), "opaque": list(self.opaque)}

    def note(self, family: str, label: str, why: str) -> None:
        """`family` computed at `label` (kept when it is the lowest so far)."""
        if family not in self.lowest or level(label) < level(self.lowest[family]):
            self.lowest[family], self.why[family] = label, why

    def overall(self) -> str:
        """The lowest precision any family ran at (float32 when nothing floating ran)."""
        return min(self.lowest.values(), key=level, default="float32")


def _family(name: str) -> str | None:
    if name in CONV_OPS:
        return "conv"
    if name in MATMUL_OPS:
        return "matmul"
    return None


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, list | tuple):
            yield from (t for t in v if isinstance(t, torch.Tensor))


class _Watch(TorchFunctionMode):
    def __init__(self, record: RanPrecision) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        with contextlib.suppress(Exception):  # watching never breaks the program
            self._note(str(getattr(func, "__name__", "")), (*args, *(kwargs or {}).values()), out)
        return out

    def _note(self, name: str, args: Any, out: Any) -> None:
        floats = [t for t in _tensors(args) if t.is_floating_point()]
        results = [t for t in _tensors(out if isinstance(out, list | tuple) else (out,)) if t.is_floating_point()]
        if not floats and not results:
            return
        r = self.record
        for t, how in [*((t, "on") for t in floats), *((t, "made") for t in results)]:
            label = str(t.dtype).removeprefix("torch.")
            if label not in r.dtypes:
                r.dtypes.append(label)
            r.note("other", _label(t.dtype), f"{name} {how} {label}")
        fam = _family(name)
        if fam is None or not floats:
            return
        r.ops[fam] = r.ops.get(fam, 0) + 1
        dtype, device_type = floats[0].dtype, floats[0].device.type
        cast = _autocast(device_type) if dtype == torch.float32 else None
        if cast is not None:
            how = f"{_label(cast)} (autocast)"
        else:
            how = op_precision(fam, dtype, r.device, flags()) or ""  # as they are now: a design may move them
        if how:
            r.reduced.setdefault(fam, how)
            r.note(fam, _how_level(how), f"{name}: {how}")
        else:
            r.note(fam, _label(dtype), f"{name} on {_label(dtype)}")


@contextlib.contextmanager
def _triton_launches(record: RanPrecision) -> Iterator[None]:
    """Each Triton kernel launched inside (`JITFunction.run`, when Triton is already loaded)
    noted under the family "kernel"."""
    jit = sys.modules.get("triton.runtime.jit")
    cls = getattr(jit, "JITFunction", None)
    original = getattr(cls, "run", None)
    if cls is None or original is None:
        yield
        return

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            fn = getattr(self, "fn", None)
            source = getattr(self, "src", None) or (inspect.getsource(fn) if fn is not None else "")
            dtypes = [t.dtype for t in _tensors((*args, *kwargs.values())) if t.is_floating_point()]
            label, why = triton_precision(str(source), dtypes)
            record.ops["kernel"] = record.ops.get("kernel", 0) + 1
            record.note("kernel", label, f"{getattr(fn, '__name__', 'a Triton kernel')}: {why}")
        return original(self, *args, **kwargs)

    cls.run = run
    try:
        yield
    finally:
        cls.run = original


@contextlib.contextmanager
def watching(device: str, design: bool = False) -> Iterator[RanPrecision]:
    """Watch the calls made inside; the record fills as they run. `design`: Triton launches
    are watched too, and compiled code runs eagerly (torch.compile's `force_eager` stance,
    only where torch._dynamo is already loaded: nothing is imported for it)."""
    record = RanPrecision(device, flags())
    with contextlib.ExitStack() as stack:
        if design:
            stack.enter_context(_triton_launches(record))
            if "torch._dynamo" in sys.modules:
                stack.enter_context(torch.compiler.set_stance("force_eager"))
        stack.enter_context(_Watch(record))
        yield record


def downgrade(reference: RanPrecision, design: RanPrecision) -> str | None:
    """Where the design computed below the reference, in words, or None. Each family is held
    to the reference's own precision for it (convolutions to its convolutions); a family the
    reference did not run, and the design's Triton kernels (what they implement is not seen),
    to the lowest precision the reference ran at anywhere."""
    floor = reference.overall()
    for fam, label in sorted(design.lowest.items()):
        base = reference.lowest.get(fam, floor) if fam != "kernel" else floor
        if level(label) < level(base):
            return (f"{FAMILY_WORDS.get(fam, fam)} computed in {label} where the reference computed in {base} "
                    f"({design.why.get(fam)})")
    return None


@dataclass(frozen=True)
class Evidence:
    """What decides how far from float64 a design may be."""

    seen: bool
    """The design's work was seen at the reference's precision or higher."""
    words: str
    """Which evidence decided, for the verdict's words."""
    downgrade: str | None = None
    """The design computed below the reference (rejected whatever its error), in words."""

    def to_json(self) -> dict[str, Any]:
        return {"seen": self.seen, "words": self.words, "downgrade": self.downgrade}


INHERITED = Evidence(True, "torch.compile of the reference: the reference's own operators at its precision")
"""A compiled baseline's evidence: it runs the reference's operators under the same flags."""


def evidence(reference: RanPrecision | None, design: RanPrecision | None) -> Evidence:
    """The evidence the two records give (either may be missing: not watched)."""
    if reference is None or design is None:
        return Evidence(False, "the design's precision was not seen")
    low = downgrade(reference, design)
    if low is not None:
        return Evidence(False, f"a precision downgrade: {low}", low)
    if design.opaque:
        return Evidence(False, f"its own native code ({', '.join(design.opaque)}) computes unseen")
    heavy = {"conv", "matmul"} & set(reference.ops)
    if heavy and not ({"conv", "matmul", "kernel"} & set(design.ops)):
        return Evidence(False, f"none of the design's {' or '.join(FAMILY_WORDS[f] for f in sorted(heavy))} was seen")
    return Evidence(True, f"the design computed at the reference's precision or higher ({design.summary()})")
