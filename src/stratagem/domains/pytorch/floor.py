"""Owns the roofline floor in the parent: the fastest time the measured work could take.

floor = max(min_bytes / bandwidth, flops / fastest admitted matmul rate), from the worker's
count of the reference's work and the device's calibrated peaks. The rate admitted is the
fastest math mode the problem's tolerance allows, never slower: float32 problems always admit
TF32 (cuDNN runs float32 convolutions in TF32 by default, so an honest result may beat the
float32 CUDA-core floor), a tolerance of 1e-3 or more admits fp16 rates, 1e-2 or more bf16.
A runtime below floor x (1 - margin) is rejected as impossible; every valid design gets its
fraction of speed-of-light (floor / runtime).

The bytes term's bandwidth is the main-memory one when the timer flushes caches between
calls (the GPU timer overwrites L2 before every call). The CPU timer does not, and a working
set that fits in the CPU's caches moves far faster than main memory (an honest 4 MiB ReLU was
rejected as impossible when the floor used it), so there the bandwidth is the calibrated
cache bandwidth (the fastest of copies and sums over working sets from L1 to L3 sizes) times
CACHE_HEADROOM, since hand-written SIMD loops may move data faster than torch's own ops.
Peaks calibrated before it existed (no `cache_bandwidth_gbps`) give no bytes floor there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stratagem.core.verdict import ValidatorResult

CACHE_HEADROOM = 2.0
"""The CPU's cache bandwidth in the floor is this many times the calibrated one: torch's copy
and sum do not reach every core's load ports, an honest vectorised kernel may."""

PEAKS_VERSION = 2
"""The calibration's format: cached peaks of another version are measured again."""

CALIBRATION_SOURCE = (
    "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    "def get_inputs():\n    return [torch.zeros(1)]\n\n\ndef get_init_inputs():\n    return []\n"
)
"""The problem the peaks are calibrated with (`PyTorchDomain.calibration_problem`): the
smallest valid one, an identity; only the calibrate stage runs on it."""

DEFAULT_MARGIN = 0.5
"""A runtime under half the floor is impossible: measured peaks sit within ~10-20% of real
ones, so honest code never comes near this."""


def admitted_modes(dtype: str | None, tolerance: Mapping[str, float] | None) -> list[str]:
    tol = max(float((tolerance or {}).get("atol", 0.0)), float((tolerance or {}).get("rtol", 0.0)))
    modes = ["float32", "tf32"]
    if dtype in ("float16", "bfloat16"):
        modes += ["float16", "bfloat16"]
    if tol >= 1e-3:
        modes.append("float16")
    if tol >= 1e-2:
        modes.append("bfloat16")
    return sorted(set(modes))


def floor_ms(
    work: Mapping[str, Any], peaks: Mapping[str, Any], tolerance: Mapping[str, float] | None,
    cache_flushed: bool = True,
) -> dict[str, Any]:
    rates: Mapping[str, float] = peaks.get("matmul_tflops", {})
    modes = [m for m in admitted_modes(work.get("dtype"), tolerance) if rates.get(m)]
    fastest = max(modes, key=lambda m: rates[m]) if modes else None
    if cache_flushed:
        bw = float(peaks.get("bandwidth_gbps") or 0.0)
    else:
        bw = float(peaks.get("cache_bandwidth_gbps") or 0.0) * CACHE_HEADROOM
    memory = float(work.get("min_bytes", 0)) / (bw * 1e9) * 1e3 if bw > 0 else 0.0
    flops = float(work.get("flops", 0))
    compute = flops / (rates[fastest] * 1e12) * 1e3 if fastest else 0.0
    return {
        "floor_ms": max(memory, compute),
        "memory_ms": memory,
        "compute_ms": compute,
        "rate_mode": fastest,
        "bound": "memory" if memory >= compute else "compute",
        "memory_floor": ("main memory" if cache_flushed else "cache") if bw > 0 else None,
        "bandwidth_gbps": bw,
    }


def roofline_result(
    runtime_ms: float | None,
    work: Mapping[str, Any] | None,
    peaks: Mapping[str, Any] | None,
    tolerance: Mapping[str, float] | None,
    margin: float = DEFAULT_MARGIN,
    cache_flushed: bool = True,
) -> ValidatorResult:
    """The `roofline` validator: reject a runtime below the floor, report speed-of-light.

    Args:
        cache_flushed: the timer flushed caches before every call (else no bytes floor).
    """
    if runtime_ms is None or not work or not peaks:
        missing = "runtime" if runtime_ms is None else ("work estimate" if not work else "device peaks")
        return ValidatorResult("roofline", "passed", details={"checked": False, "note": f"not checked: no {missing}"})
    f = floor_ms(work, peaks, tolerance, cache_flushed)
    details: dict[str, Any] = {
        "checked": True, **f, "runtime_ms": runtime_ms, "margin": margin,
        "sol_fraction": f["floor_ms"] / runtime_ms if runtime_ms > 0 else None,
        "flops": work.get("flops"), "min_bytes": work.get("min_bytes"),
    }
    if runtime_ms < f["floor_ms"] * (1 - margin):
        return ValidatorResult(
            "roofline", "failed", kind="rejected", details=details,
            reason=(
                f"impossible speed: {runtime_ms:.4g} ms is below the roofline floor {f['floor_ms']:.4g} ms "
                f"({f['bound']}-bound: {work.get('min_bytes')} bytes at {f['bandwidth_gbps']:.0f} GB/s "
                f"({f['memory_floor'] or 'no bytes floor'}), "
                f"{work.get('flops')} FLOPs at the {f['rate_mode']} rate) by more than {margin:.0%}; "
                "the work was not all done inside the timed region"
            ),
        )
    return ValidatorResult("roofline", "passed", details=details)
