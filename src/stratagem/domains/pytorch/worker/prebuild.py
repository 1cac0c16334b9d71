"""Owns the prebuild stage: a design's `load_inline` extensions built on a CPU worker before the
design takes a GPU slot (issue 29, item 4), so the GPU's workers time designs while compilers
run elsewhere, and the design's own evaluation loads its extension from the build cache.

Worker-side only. The worker sees no GPU (`CUDA_VISIBLE_DEVICES` empty) and builds for the
architecture the parent read from the GPU (`STRATAGEM_BUILD_ARCH`, `inline_builds.install`), so
the cache key is the one the GPU worker computes. The stage imports the candidate module (where
KernelBench-style designs call `load_inline`) and builds `ModelNew(*get_init_inputs())` on the
CPU (where others do); whatever fails after the builds (a `.cuda()` in `__init__`, a CPU-only
torch op) is reported, never judged: the design's real evaluation decides everything.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch  # noqa: F401 - worker-side (the candidate and its builds)

from stratagem.domains.pytorch.build import inline_builds
from stratagem.domains.pytorch.worker import runtime

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext


def run_prebuild(w: StageContext) -> dict[str, Any]:
    cand = w.req.get("candidate")
    if cand is None:
        return {"builds": [], "note": "no candidate"}
    first = w.install_builds()
    t0 = time.perf_counter()
    note = None
    try:
        ref_mod = runtime.load_module(runtime.REFERENCE_MODULE, w.req["problem"]["source"], w.workdir,
                                      "reference.py")
        mod = runtime.load_module(runtime.CANDIDATE_MODULE, cand["source"], w.workdir,
                                  cand.get("filename", "candidate.py"))
        if isinstance(getattr(mod, "ModelNew", None), type):
            init_inputs = runtime.init_inputs(ref_mod, int(w.req["init_seed"]), "cpu")
            runtime.instantiate(mod.ModelNew, init_inputs, int(w.req["init_seed"]), "cpu")
    except (Exception, SystemExit) as e:  # after (or instead of) the builds: the evaluation decides
        note = f"stopped after the builds: {runtime.one_line(e)}"
    events = inline_builds.EVENTS[first:]
    return {"builds": [e.to_json() for e in events], "seconds": round(time.perf_counter() - t0, 3),
            "note": note, "arch": inline_builds.target_arch()}
