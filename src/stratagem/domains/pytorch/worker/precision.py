"""Owns detecting the precision the reference's operators ran at, on this device.

Worker-side only. One reference call is watched by a torch function mode (not a dispatch mode:
the first operator under a `TorchDispatchMode` imports torch._dynamo, 3 s on an H200, and every
later `torch._dynamo.reset` between shape variants then costs seconds more) that records each
operator family that rounds below its dtype under torch's flags (convolutions and matmuls in TF32 on a
GPU, bf16 matmuls under `float32_matmul_precision = "medium"`, fp16/bf16 matmuls with
reduced-precision reductions) and the floating dtypes the reference computed in. The record
says what the reference ran at (`ReferencePrecision.summary`): the correctness details and
`show` carry it beside the rule that decided. It decides nothing itself: how far the
reference is from float64 is measured (the anchor), for every operator, known or not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

CONV_OPS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                      "conv_transpose2d", "conv_transpose3d", "conv_tbc",
                      # cuDNN's recurrent layers round like its convolutions (cudnn.allow_tf32)
                      "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell"})
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "__matmul__", "__rmatmul__", "linear", "bilinear",
                        "addbmm", "addmv", "mv", "dot", "einsum", "tensordot", "scaled_dot_product_attention",
                        "multi_head_attention_forward", "chain_matmul", "multi_dot"})
"""The functions (as a torch function mode sees them: `torch.*`, `torch.nn.functional.*`, tensor
methods) by family; a module's forward reaches them (nn.Conv2d -> conv2d, nn.Linear -> linear)."""


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


def op_precision(family: str, dtype: torch.dtype, device: str, f: dict[str, Any]) -> str | None:
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


@dataclass
class ReferencePrecision:
    """What one reference call computed in."""

    device: str
    flags: dict[str, Any] = field(default_factory=dict)
    dtypes: list[str] = field(default_factory=list)
    """The floating dtypes of the operators' inputs."""
    reduced: dict[str, str] = field(default_factory=dict)
    """Op family ("conv", "matmul") -> the precision below its dtype it ran at."""
    ops: dict[str, int] = field(default_factory=dict)
    """Op family -> operators counted."""

    def summary(self) -> str:
        """One line: `exact float32`, `float32 with TF32 convolutions (...)`, ..."""
        base = " and ".join(self.dtypes) or "no floating operator"
        if not self.reduced:
            return f"{base} (exact: no operator below its dtype)"
        parts = [f"{'convolutions' if fam == 'conv' else 'matmuls'} in {how}" for fam, how in sorted(self.reduced.items())]
        return f"{base}, with " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "summary": self.summary(), "reduced": dict(self.reduced),
                "dtypes": list(self.dtypes), "ops": dict(self.ops), "flags": dict(self.flags)}


def _family(name: str) -> str | None:
    if name in CONV_OPS:
        return "conv"
    if name in MATMUL_OPS:
        return "matmul"
    return None


class _Watch(TorchFunctionMode):
    def __init__(self, record: ReferencePrecision) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        with contextlib.suppress(Exception):  # watching never breaks the reference
            self._note(str(getattr(func, "__name__", "")), (*args, *(kwargs or {}).values()))
        return func(*args, **(kwargs or {}))

    def _note(self, name: str, args: Any) -> None:
        dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
        if dtype is None:
            return
        r = self.record
        label = str(dtype).removeprefix("torch.")
        if label not in r.dtypes:
            r.dtypes.append(label)
        fam = _family(name)
        if fam is None:
            return
        r.ops[fam] = r.ops.get(fam, 0) + 1
        how = op_precision(fam, dtype, r.device, r.flags)
        if how is not None:
            r.reduced.setdefault(fam, how)


@contextlib.contextmanager
def watching(device: str) -> Iterator[ReferencePrecision]:
    """Watch the reference calls made inside; the record fills as they run."""
    record = ReferencePrecision(device, flags())
    with _Watch(record):
        yield record
