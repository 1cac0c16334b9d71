"""Owns the roofline floor in the parent: the fastest time the measured work could take.

floor = max(min_bytes / bandwidth, flops / fastest admitted matmul rate), from the worker's
count of the reference's work and the device's calibrated peaks. The rates admitted are those
of the precisions a design may compute in under the run's correctness rule
(`precisions.admitted`): the reference's own precision and above, and below it only what the
tolerance admits. A float32 problem whose reference ran in full float32 is bounded at the
float32 rate, not TF32's (the default rule rejects a TF32 design there, so a floor at TF32's
rate could never be reached); one whose reference ran TF32 (cuDNN's convolutions by default)
at TF32's. A runtime below floor x (1 - margin) is rejected as impossible; every valid design
gets its fraction of speed-of-light (floor / runtime).

The bytes term's bandwidth is the main-memory one when the timer flushes caches between
calls (the GPU timer overwrites L2 before every call). The CPU timer does not, and a working
set that fits in the CPU's caches moves far faster than main memory (an honest 4 MiB ReLU was
rejected as impossible when the floor used it), so there the bandwidth is the calibrated
cache bandwidth (the fastest of copies and sums over working sets from L1 to L3 sizes) times
CACHE_HEADROOM, since hand-written SIMD loops may move data faster than torch's own ops.
Peaks calibrated before it existed (no `cache_bandwidth_gbps`) give no bytes floor there.

The domain's `Peaks` capability (`PyTorchPeaks`) is here too: the calibration problem, and
how an eager reference that beats the floor proves the peaks too low (`reference_beats_floor`)
and raises them to what it was measured doing (`demonstrated_peaks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch import precisions

if TYPE_CHECKING:  # the worker's roofline reads PEAKS_VERSION here, and nothing more
    from stratagem.core.graph import ValidatorSpec
    from stratagem.core.problem import Problem

CACHE_HEADROOM = 2.0
"""The CPU's cache bandwidth in the floor is this many times the calibrated one: torch's copy
and sum do not reach every core's load ports, an honest vectorised kernel may."""

PEAKS_VERSION = 3
"""The calibration's format: cached peaks of another version are measured again (3: a float64
matmul rate)."""

CALIBRATION_SOURCE = (
    "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    "def get_inputs():\n    return [torch.zeros(1)]\n\n\ndef get_init_inputs():\n    return []\n"
)
"""The problem the peaks are calibrated with (`PyTorchDomain.calibration_problem`): the
smallest valid one, an identity; only the calibrate stage runs on it."""

DEFAULT_MARGIN = 0.5
"""A runtime under half the floor is impossible: measured peaks sit within ~10-20% of real
ones, so honest code never comes near this."""


def floor_ms(
    work: Mapping[str, Any], peaks: Mapping[str, Any], tolerance: Mapping[str, float] | None,
    cache_flushed: bool = True, correctness: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The floor and its terms; `correctness`: the correctness stage's details (the rule's
    reference precision, `precisions.admitted`)."""
    rates: Mapping[str, float] = peaks.get("matmul_tflops", {})
    admitted, why = precisions.admitted(work.get("dtype"), tolerance, correctness)
    modes = [m for m in admitted if rates.get(m)]
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
        "admitted": admitted,
        "basis": (f"FLOPs at the {fastest} matmul rate, the fastest of the precisions a design may compute in: "
                  if fastest else "no calibrated matmul rate for the precisions a design may compute in: ") + why,
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
    correctness: Mapping[str, Any] | None = None,
) -> ValidatorResult:
    """The `roofline` validator: reject a runtime below the floor, report speed-of-light.

    Args:
        cache_flushed: the timer flushed caches before every call (else no bytes floor).
        correctness: the correctness stage's details (the reference's precision under the rule).
    """
    if runtime_ms is None or not work or not peaks:
        missing = "runtime" if runtime_ms is None else ("work estimate" if not work else "device peaks")
        return ValidatorResult("roofline", "passed", details={"checked": False, "note": f"not checked: no {missing}"})
    f = floor_ms(work, peaks, tolerance, cache_flushed, correctness)
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


FLOOR_NOISE = 0.03
"""The eager reference proves the peaks wrong only when it runs more than this fraction under
the floor: its median moves by about that much between evaluations, and peaks raised to one
evaluation's reference (`demonstrated_peaks`) must hold at the next."""


def reference_beats_floor(earlier: Mapping[str, ValidatorResult], roofline: ValidatorResult) -> str | None:
    """A description of how the eager reference (timed beside the candidate) beats the
    roofline floor, which proves the calibrated peaks too low; None when it does not."""
    timing = earlier.get("timing")
    ref = (timing.details.get("reference") or {}) if timing is not None else {}
    ref_ms, floor = ref.get("median_ms"), roofline.details.get("floor_ms")
    if not roofline.details.get("checked") or not isinstance(ref_ms, int | float) or not isinstance(floor, int | float):
        return None
    if ref_ms < floor * (1 - FLOOR_NOISE):
        return f"the eager reference ran in {ref_ms:.4g} ms, under the floor of {floor:.4g} ms"
    return None


def demonstrated_peaks(earlier: Mapping[str, ValidatorResult], roofline: ValidatorResult,
                       peaks: Mapping[str, Any]) -> dict[str, Any] | None:
    """`peaks` with the rate that bounds the floor raised to what the eager reference was
    measured doing (bytes or FLOPs over its median): an honest program proved the device that
    fast, where a copy or a matmul calibrated lower (an elementwise kernel over 6.4 GB ran at
    4.2 TB/s on an H200 whose calibrated copy did less). None when nothing can be raised."""
    timing = earlier.get("timing")
    ref_ms = ((timing.details.get("reference") or {}) if timing is not None else {}).get("median_ms")
    d = roofline.details
    if not isinstance(ref_ms, int | float) or ref_ms <= 0:
        return None
    out = {**peaks, "matmul_tflops": dict(peaks.get("matmul_tflops") or {})}
    if d.get("bound") == "memory" and d.get("memory_floor") == "main memory" and d.get("memory_ms"):
        out["bandwidth_gbps"] = float(d["bandwidth_gbps"]) * float(d["memory_ms"]) / float(ref_ms)
        what = f"bandwidth {out['bandwidth_gbps']:.0f} GB/s"
    elif d.get("bound") == "compute" and d.get("rate_mode") and d.get("compute_ms"):
        mode = str(d["rate_mode"])
        out["matmul_tflops"][mode] = float(out["matmul_tflops"][mode]) * float(d["compute_ms"]) / float(ref_ms)
        what = f"{mode} matmul rate {out['matmul_tflops'][mode]:.1f} TFLOP/s"
    else:
        return None
    out["raised"] = [*list(peaks.get("raised") or []), f"{what}: what an eager reference was measured doing"]
    return out


def admitted_tolerance(correctness: Mapping[str, Any]) -> dict[str, float]:
    """The relative error the calibrated rule admitted in these correctness details (the
    largest limit over the anchor's magnitude), as a tolerance the roofline can read."""
    rel = 0.0
    for t in correctness.get("trials") or ():
        for a in t.get("anchor") or ():
            if a.get("magnitude"):
                rel = max(rel, float(a["limit"]) / float(a["magnitude"]))
    return {"atol": 0.0, "rtol": rel}


@dataclass
class PyTorchPeaks:
    """The PyTorch domain's `Peaks` (`domains/base.py`): the roofline's device peaks, calibrated
    on an identity module (`CALIBRATION_SOURCE`) by `calibrate_graph`."""

    calibrate_graph: tuple[ValidatorSpec, ...]
    version = PEAKS_VERSION

    def calibration_problem(self) -> Problem:
        from stratagem.domains.pytorch.problem import parse_problem

        return parse_problem(CALIBRATION_SOURCE, name="calibration")

    def reads_peaks(self, name: str) -> bool:
        return name in ("roofline", "kernels")

    def reference_beats_floor(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult) -> str | None:
        return reference_beats_floor(earlier, result)

    def demonstrated(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult,
                     peaks: Mapping[str, Any]) -> dict[str, Any] | None:
        return demonstrated_peaks(earlier, result, peaks)
