"""Owns the `profile` tool's table in the parent (the `kernels` stage of `PROBE_GRAPHS["profile"]`):
each profiled row (a GPU kernel, or a CPU operator; `worker/profile.py`) beside the device's
calibrated peaks: its time and share, the bandwidth it achieved (bytes of its launching
operator's tensor inputs over its time: a lower bound, outputs are not recorded) against the
calibrated bandwidth, its FLOP rate against the calibrated matmul rate of its dtype, and its
own roofline floor (the least time its bytes and FLOPs take at those peaks). Rows without
recorded work keep their time alone. Never a verdict: it always passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stratagem.core.verdict import ValidatorResult

RATE_MODE = {"float": "float32", "float32": "float32", "c10::Half": "float16", "half": "float16",
             "float16": "float16", "c10::BFloat16": "bfloat16", "bfloat16": "bfloat16"}
"""The calibrated matmul rate (`peaks["matmul_tflops"]`) a row's FLOPs are set against, by the
dtype of its launching operator's first input (float32 against float32's, not TF32's, unless
the kernel's own name says it computes in TF32: `rate_mode`)."""


def rate_mode(name: str, dtype: Any) -> str | None:
    """The rate a kernel's FLOPs are set against: its operator's dtype's, or TF32's where a
    float32 kernel's name says TF32 (cuBLAS's and CUTLASS's `..._tf32...` GEMMs, which a
    reference run with `allow_tf32` launches: against the float32 peak they read as impossible)."""
    mode = RATE_MODE.get(str(dtype)) if dtype is not None else None
    return "tf32" if mode == "float32" and "tf32" in name.lower() else mode


def _row(r: list[Any], total_us: float, bw_gbps: float, rates: Mapping[str, float]) -> dict[str, Any]:
    name, us, calls = str(r[0]), float(r[1]), int(r[2])
    nbytes = int(r[3]) if len(r) > 3 and r[3] is not None else None
    flops = int(r[4]) if len(r) > 4 and r[4] is not None else None
    mode = rate_mode(name, r[5] if len(r) > 5 else None)
    rate = float(rates.get(mode) or 0.0) if mode else 0.0
    out: dict[str, Any] = {"name": name, "us": us, "calls": calls, "share": us / total_us if total_us > 0 else None,
                           "bytes": nbytes, "flops": flops}
    floors = []
    if nbytes and us > 0:
        out["gbps"] = nbytes / (us * 1e-6) / 1e9
        if bw_gbps > 0:
            out["bandwidth_fraction"] = out["gbps"] / bw_gbps
            floors.append(nbytes / (bw_gbps * 1e9) * 1e6)
    if flops and us > 0:
        out["tflops"] = flops / (us * 1e-6) / 1e12
        if rate > 0:
            out["rate_mode"], out["flop_fraction"] = mode, out["tflops"] / rate
            floors.append(flops / (rate * 1e12) * 1e6)
    if floors:
        out["floor_us"] = max(floors)
    return out


def kernel_table(profile: Mapping[str, Any], peaks: Mapping[str, Any] | None) -> ValidatorResult:
    """The `kernels` stage: the profile's rows against `peaks` (None: not calibrated; rows keep
    their times and achieved rates)."""
    rows = [r for r in profile.get("rows") or () if isinstance(r, list | tuple) and len(r) >= 3]
    total = float(profile.get("total_us") or 0.0)
    bw = float((peaks or {}).get("bandwidth_gbps") or 0.0)
    rates: Mapping[str, float] = (peaks or {}).get("matmul_tflops") or {}
    details: dict[str, Any] = {
        "device": profile.get("device"), "source": profile.get("source"), "total_us": total,
        "call_ms": profile.get("call_ms"), "rows": [_row(list(r), total, bw, rates) for r in rows],
        "peaks": {"bandwidth_gbps": bw or None, "matmul_tflops": dict(rates)} if peaks else None,
    }
    rest = profile.get("rest")
    if isinstance(rest, list | tuple) and len(rest) >= 2 and rest[0]:
        details["rest"] = {"count": int(rest[0]), "us": float(rest[1]),
                           "share": float(rest[1]) / total if total > 0 else None}
    if profile.get("note"):
        details["note"] = profile["note"]
    return ValidatorResult("kernels", "passed", details=details)
