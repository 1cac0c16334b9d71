"""Owns how the PyTorch domain's validator details read in the `eval` view
(`PyTorchDomain.describe`): the correctness trials and their errors, the paired timing, the
integrity checks, the shape variants and the roofline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stratagem.domains.views import describe_correctness, describe_timing


def describe(name: str, d: Mapping[str, Any]) -> str | None:
    """One line for a passed validator's details (None: its reason)."""
    if name == "correctness":
        return describe_correctness(d)
    if name == "timing":
        return describe_timing(d, "eager")
    if name == "integrity":
        return "checks: " + ", ".join(d.get("checks", []))
    if name == "shapes":
        sizes = [x.get("sizes") for x in d.get("variants", []) if "max_abs_err" in x]
        return f"also correct with {sizes}" if sizes else d.get("note", "")
    if name == "roofline":
        basis = f"; {d['basis']}" if d.get("basis") else ""
        return (f"{d['sol_fraction']:.1%} of speed-of-light ({d['bound']}-bound floor {d['floor_ms']:.4g} ms{basis})"
                if d.get("checked") else d.get("note", ""))
    return None
