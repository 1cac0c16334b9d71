"""Owns the strict policy's runtime provenance check in the worker (GPU only), and the per-kernel
profile of a timed design that the agents are shown (`kernel_profile`).

Worker-side only. Under `strict`, the heavy computation must run in kernels the candidate
wrote. torch.profiler records the CUDA kernels one candidate call launches; kernels whose
names contain one of the candidate's own kernel names (its `__global__` functions and Triton
`@jit` functions, found statically by the parent) must account for at least half of the GPU
time. Then the candidate's kernels are disabled (Triton launches become no-ops; functions
exported by its compiled extensions have their tensor results zeroed) on NaN-poisoned memory:
its output must change, or the kernels were not doing the work. On the CPU there are no
kernels to attribute: the check is static only (`own_kernels`) and the stage says so.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, integrity, runtime
from stratagem.domains.pytorch.worker.runtime import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.stages import Worker

OWN_TIME_FRACTION = 0.5


PROFILE_TOP = 10
"""Kernels kept in a design's per-kernel profile (the heaviest by device time)."""


def kernel_profile(w: Worker, model: Any, inputs: list[Any]) -> dict[str, Any]:
    """One call of a timed (warm) design under torch.profiler, on a GPU: its heaviest kernels
    as [name, microseconds] (what the agents are shown), or why there is no profile. Run after
    timing, under the exclusive lock; its output is not used, so a design that detects the
    profiler gains nothing."""
    if not w.device.startswith("cuda"):
        return {"kernels": [], "note": "per-kernel profiles are taken on GPUs only"}
    t0 = time.perf_counter()
    try:
        from torch.profiler import ProfilerActivity, profile

        args = runtime.clone_inputs(inputs)
        with w.hold("exclusive"), torch.no_grad():
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                w._call_candidate(model, args)
                torch.cuda.synchronize()
        kernels = sorted(_kernel_times(prof), key=lambda kt: -kt[1])
    except Exception as e:  # noqa: BLE001 - a profile that cannot be taken is only missing
        return {"kernels": [], "note": f"no profile: {runtime.one_line(e)}"}
    return {"kernels": [[name, round(us, 3)] for name, us in kernels[:PROFILE_TOP]],
            "total_us": round(sum(us for _, us in kernels), 3), "unit": "us",
            "profile_s": round(time.perf_counter() - t0, 4)}


def _kernel_times(prof: Any) -> list[tuple[str, float]]:
    out = []
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None)
        if t is None:
            t = getattr(evt, "cuda_time_total", 0.0)
        dev = str(getattr(evt, "device_type", ""))
        if t and "CUDA" in dev.upper():
            out.append((str(evt.key), float(t)))
    return out


@contextlib.contextmanager
def _ghosted(module: types.ModuleType) -> Iterator[int]:
    """Disable the candidate's kernels for the duration; yields how many were disabled."""
    patched: list[tuple[Any, str, Any]] = []
    try:
        for value in list(vars(module).values()):
            cls = type(value).__name__
            if cls in ("JITFunction", "Autotuner", "Heuristics") and hasattr(value, "run"):
                patched.append((value, "run", value.run))
                value.run = lambda *a, **k: None
            elif isinstance(value, types.ModuleType) and str(getattr(value, "__file__", "")).endswith(".so"):
                for name, fn in list(vars(value).items()):
                    if callable(fn) and not name.startswith("_"):
                        patched.append((value, name, fn))
                        setattr(value, name, _zeroing(fn))
        yield len(patched)
    finally:
        for obj, name, orig in reversed(patched):
            setattr(obj, name, orig)


def _zeroing(fn: Any) -> Any:
    def ghost(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return torch.zeros_like(out)
        if isinstance(out, list | tuple):
            return type(out)(torch.zeros_like(x) if isinstance(x, torch.Tensor) else x for x in out)
        return out

    return ghost


def run_provenance(w: Worker) -> dict[str, Any]:
    if not w.device.startswith("cuda"):
        return {"checked": False, "note": "kernel provenance is profiled on GPUs only; checked statically here"}
    p = w._programs(need_candidate=True)
    assert p.candidate is not None and p.candidate_module is not None
    own = [str(n) for n in w.req.get("own_kernels", [])]
    inputs = w._inputs(p, int(w.req["integrity_seeds"][0]) ^ 0x5EED)
    with torch.no_grad():
        ref = w._call_reference(p.reference, runtime.clone_inputs(inputs))
        w._call_candidate(p.candidate, runtime.clone_inputs(inputs))  # warm: compiles, autotuning
        from torch.profiler import ProfilerActivity, profile

        args = runtime.clone_inputs(inputs)  # copied outside the profile: only the call is attributed
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            w._call_candidate(p.candidate, args)
            torch.cuda.synchronize()
        del args
    kernels = _kernel_times(prof)
    total = sum(t for _, t in kernels)
    mine = sum(t for name, t in kernels if any(k in name for k in own))
    details: dict[str, Any] = {
        "checked": True, "own_kernels": own, "kernels": kernels[:30],
        "own_time_fraction": mine / total if total else 0.0,
    }
    if not own or total <= 0 or mine / total < OWN_TIME_FRACTION:
        others = ", ".join(name[:60] for name, _ in sorted(kernels, key=lambda x: -x[1])[:4]) or "none"
        raise StageFailure(
            "rejected",
            f"strict: only {details['own_time_fraction']:.0%} of the GPU time ran in the candidate's own "
            f"kernels {own or '(none found)'}; the rest ran in library kernels ({others})",
            details,
        )
    with _ghosted(p.candidate_module) as n:
        integrity.poison_allocator(w.device, runtime.inputs_nbytes(inputs))
        with torch.no_grad():
            ghost_out = w._call_candidate(p.candidate, runtime.clone_inputs(inputs))
    details["disabled"] = n
    if n and compare.compare_outputs(ref, ghost_out, w.tolerances()).ok:
        raise StageFailure(
            "rejected",
            "strict: with the candidate's own kernels disabled its output is still correct: "
            "the kernels are not doing the work",
            details,
        )
    return details
