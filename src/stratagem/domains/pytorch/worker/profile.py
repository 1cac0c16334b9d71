"""Owns the worker side of the writers' `profile` tool (`PROBE_GRAPHS["profile"]`): one warm
call of the loaded design profiled, never timed against anything and never a verdict.

On a GPU the heaviest kernels by device time (`provenance.kernel_profile`, the profile a timed
design carries); on the CPU the heaviest of torch's operators by their own CPU time
(torch.autograd.profiler). Either way the total, so the parent can set it beside the roofline
floor.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import provenance, runtime

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

TOP = 10
"""Operators (CPU) kept in a profile, the heaviest first."""


def run_profile(w: StageContext) -> dict[str, Any]:
    """Profile one call of the candidate after a warm-up call, on the first seed's inputs."""
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    inputs = w.make_inputs(p, int(w.req["seeds"][0]))
    with w.hold("shared"), torch.no_grad():
        w.call_candidate(p.candidate, runtime.clone_inputs(inputs))  # builds, autotuning, caches
    if w.device.startswith("cuda"):
        return {"device": "cuda", **provenance.kernel_profile(w, p.candidate, inputs)}
    t0 = time.perf_counter()
    from torch.autograd import profiler

    prof: Any = profiler.profile(use_cpu=True)
    with w.hold("exclusive"), torch.no_grad(), prof:
        c0 = time.perf_counter()
        w.call_candidate(p.candidate, runtime.clone_inputs(inputs))
        call_ms = (time.perf_counter() - c0) * 1e3
    events: Any = prof.key_averages()
    ops = sorted(((str(e.key), float(e.self_cpu_time_total), int(e.count)) for e in events),
                 key=lambda o: -o[1])
    return {"device": "cpu", "operators": [[name, round(us, 3), n] for name, us, n in ops[:TOP] if us > 0],
            "total_us": round(sum(us for _, us, _ in ops), 3), "call_ms": round(call_ms, 4), "unit": "us",
            "profile_s": round(time.perf_counter() - t0, 4)}
