"""Owns the precisions a program computes in, without torch: their order (`LEVELS`, `level`),
shared by the worker's watch of what ran (`worker/precision.py`) and the parent's roofline
floor, and which of them a design may compute the problem's work in under the run's
correctness rule (`admitted`), whose calibrated matmul rates bound the floor (`floor.py`).

A design may compute in every precision at or above the lowest the reference was seen
computing in (the correctness details' `reference_precision`; where none was recorded, the
dtype of its output): the default rule (`reference`) rejects anything below it whatever its
error, so TF32 is admitted on a float32 problem only where the reference itself ran TF32
(cuDNN's convolutions do by default). Below that, only what the tolerance admits by its
mantissa (`TOLERANCE_ADMITS`): code whose precision cannot be seen (its own CUDA) is judged
by its error alone, and so is every design under the `fixed` and `calibrated` rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LEVELS = ("float8", "bfloat16", "float16", "tf32", "float32", "float64")
"""Precisions from the lowest to the highest (mantissa bits; fp16 and TF32 share 10, TF32 keeps
float32's range and accumulates in float32)."""

TOLERANCE_ADMITS = {"float32": 1e-5, "tf32": 1e-3, "float16": 1e-3, "bfloat16": 1e-2}
"""The least tolerance (the larger of atol and rtol) an error of each precision's rounding can
pass: float32 rounds at 6e-8, fp16 and TF32 at 5e-4, bf16 at 4e-3 (a float32 problem's
KernelBench tolerance, 1e-4, admits neither TF32 nor the half types)."""


def level(label: str) -> int:
    """The rank of a precision label (`LEVELS`; an unknown label ranks as float32)."""
    for i, name in enumerate(LEVELS):
        if label.startswith(name):
            return i
    return LEVELS.index("float32")


def reference_lowest(correctness: Mapping[str, Any] | None, dtype: str | None) -> tuple[str, str]:
    """The lowest precision the reference computed in, and where that was seen: its watched
    call's lowest over every family (the correctness details' `reference_precision`), else the
    dtype of its output."""
    ran = (correctness or {}).get("reference_precision")
    lowest = ran.get("lowest") if isinstance(ran, Mapping) else None
    if isinstance(lowest, Mapping) and lowest:
        label = min((str(v) for v in lowest.values()), key=level)
        return label, "what the reference was seen computing in"
    return str(dtype or "float32"), "the reference's output dtype"


def admitted(dtype: str | None, tolerance: Mapping[str, float] | None,
             correctness: Mapping[str, Any] | None = None) -> tuple[list[str], str]:
    """The precisions (`LEVELS` labels) a design may compute in, lowest first, and why in words:
    those at or above the reference's lowest (`reference_lowest`), and those the tolerance
    admits (`TOLERANCE_ADMITS`)."""
    tol = max(float((tolerance or {}).get("atol", 0.0)), float((tolerance or {}).get("rtol", 0.0)))
    base, seen = reference_lowest(correctness, dtype)
    modes = [m for m in LEVELS if level(m) >= level(base)]
    loose = [m for m, least in TOLERANCE_ADMITS.items() if tol >= least and m not in modes]
    out = sorted({*modes, *loose}, key=level)
    why = f"the reference's {base} and above ({seen})"
    if loose:
        why += f"; {', '.join(sorted(loose, key=level))} by the tolerance {tol:g}"
    return out, why
