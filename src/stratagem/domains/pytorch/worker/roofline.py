"""Owns the worker side of the roofline: device peak calibration and the problem's minimum work.

Worker-side only. `calibrate` measures the device's memory bandwidth (a large copy: bytes read
plus bytes written over time) and its matmul rates per dtype and math mode (fp64, fp32 with and
without TF32, bf16, fp16 on a GPU; fp64, fp32 and bf16 on the CPU: the floor of a float64
problem is bounded at the float64 rate, `precisions.admitted`). `work` counts the reference's
FLOPs with `torch.utils.flop_counter` and its minimum bytes (every input read once, every
output written once).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from stratagem.domains.pytorch.floor import PEAKS_VERSION
from stratagem.domains.pytorch.worker import runtime

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext


def _time_ms(fn: Callable[[], Any], device: str, reps: int) -> float:
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        samples = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            samples.append(s.elapsed_time(e))
        return min(samples)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    # The best of several runs: a peak is what the device can do, and other load only ever
    # makes a run slower (the median of three on a loaded machine once gave a tenth of the
    # real matmul rate, and every honest design was then rejected as impossible).
    return min(samples)


CACHE_SIZES = (64 * 2**10, 256 * 2**10, 1 * 2**20, 4 * 2**20)
"""Working sets (bytes) the CPU's cache bandwidth is measured at: from L1/L2 to L3 sizes."""


def cache_bandwidth_gbps(device: str) -> dict[str, Any]:
    """The fastest rate data moves at when it stays in the caches (the CPU timer does not
    flush them): the best, over working sets from L1 to L3 sizes, of a copy (bytes read plus
    written) and of a sum (bytes read), each timed as a loop of calls so the per-call
    dispatch does not hide the rate."""
    best, at = 0.0, {}
    for nbytes in CACHE_SIZES:
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
        dst = torch.empty_like(src)
        for name, fn, moved in (("copy", lambda d=dst, s=src: d.copy_(s), 2 * nbytes),
                                ("sum", lambda s=src: s.sum(), nbytes)):
            ms = _time_ms(fn, device, 1)  # a first estimate, then loops of about 2 ms
            loops = max(1, min(10_000, int(2.0 / max(ms, 1e-4))))
            per = _time_ms(lambda fn=fn, loops=loops: [fn() for _ in range(loops)], device, 6) / loops
            gbps = moved / (per * 1e-3) / 1e9
            at[f"{name}_{nbytes // 1024}k"] = gbps
            best = max(best, gbps)
        del src, dst
    return {"cache_bandwidth_gbps": best, "cache_bandwidth_at": at}


def run_calibrate(w: StageContext) -> dict[str, Any]:
    """The `calibrate` stage: this device's peaks (`calibrate`)."""
    return calibrate(w.device)


def calibrate(device: str) -> dict[str, Any]:
    """Measured peaks of this device: `bandwidth_gbps` and `matmul_tflops` per math mode,
    and on the CPU `cache_bandwidth_gbps` (the bytes floor there: its timer keeps caches)."""
    gpu = device.startswith("cuda")
    nbytes = (2 * 2**30) if gpu else (64 * 2**20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    copy_ms = _time_ms(lambda dst=dst, src=src: dst.copy_(src), device, 10 if gpu else 8)
    del src, dst
    n = 8192 if gpu else 512
    rates: dict[str, float] = {}
    modes = [("float64", torch.float64, False), ("float32", torch.float32, False), ("bfloat16", torch.bfloat16, False)]
    if gpu:
        modes += [("tf32", torch.float32, True), ("float16", torch.float16, False)]
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in modes:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            ms = _time_ms(lambda a=a, b=b: torch.mm(a, b), device, 10 if gpu else 8)
            rates[name] = 2 * n**3 / (ms * 1e-3) / 1e12
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    out: dict[str, Any] = {"version": PEAKS_VERSION, "bandwidth_gbps": 2 * nbytes / (copy_ms * 1e-3) / 1e9,
                           "matmul_tflops": rates}
    if not gpu:
        out.update(cache_bandwidth_gbps(device))
    return out


def _dtype(x: Any) -> str | None:
    if isinstance(x, torch.Tensor):
        return str(x.dtype).removeprefix("torch.")
    if isinstance(x, list | tuple) and x:
        return _dtype(x[0])
    return None


def work(model: torch.nn.Module, inputs: list[Any]) -> dict[str, Any]:
    """FLOPs and minimum bytes of one reference forward on `inputs`."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = model(*inputs)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "flops": int(counter.get_total_flops()),
        "min_bytes": runtime.output_nbytes(inputs) + runtime.output_nbytes(out) + params,
        "dtype": _dtype(out),
    }


def count_work(reference: Any, inputs: list[Any]) -> dict[str, Any]:
    """The reference's FLOPs and minimum bytes on `inputs` (roofline.work), or why not. Its
    first use in a process costs seconds (torch's FLOP counter initialises itself), which is
    why the judge counts it while it waits for the worker."""
    try:
        return work(reference, runtime.clone_inputs(inputs))
    except Exception as e:  # noqa: BLE001 - an uncountable reference only loses the floor
        return {"error": runtime.one_line(e)}


def preload_work_counter() -> None:
    """Import what `count_work` imports on first use (torch._dynamo and sympy: 2.5-4.7 s), so
    a process can do it on a thread while it does other work."""
    with contextlib.suppress(Exception):
        import torch._dynamo  # noqa: F401
