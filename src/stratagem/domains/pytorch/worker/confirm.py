"""Owns the confirmation stage in the worker: eager, torch.compile and several designs timed in
one process, each paired with eager, in the order the request gives (the parent rotates it
from one process to the next).

Worker-side only. Each design is loaded as its own module, built with the reference's
`get_init_inputs()` and seed, and checked once against eager on fresh inputs (a design that no
longer agrees is reported, not timed). Then each program, in order, is timed paired with eager
under two conditions: `fresh` (every call on freshly generated inputs, as the search times)
and `warm` (a warm loop over one input set, as a user's own benchmark loop runs). The parent
combines several such processes (`search/confirm.py`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, guard, record, runtime, timing
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext
    from stratagem.domains.pytorch.worker.runtime import Programs

COMPILE = "compile"
"""The name of torch.compile (default mode) of the reference among the programs."""


def _summary(stats: dict[str, Any]) -> dict[str, Any]:
    return {"speedup": stats["speedup"], "pair_ratios": stats["pair_ratios"], "pairs": stats["pairs"],
            "median_ms": stats["candidate"]["median_ms"], "reference_ms": stats["reference"]["median_ms"],
            "busy": stats["busy"]}


def _load(w: StageContext, p: Programs, index: int, source: str) -> Any:
    w.install_builds()
    mod = runtime.load_module(f"stratagem_confirm_{index}", source, w.workdir, f"design_{index}.py")
    with w.hold("shared"):
        return runtime.instantiate(mod.ModelNew, p.init_inputs, int(w.req["init_seed"]), w.device)


def _agrees(w: StageContext, p: Programs, model: Any) -> str | None:
    """Why `model` disagrees with eager on fresh inputs (None: it agrees)."""
    inputs = w.make_inputs(p, record.warm_seed(int(w.req["timing_seed"]), 7))
    with w.compiling():
        ref = p.reference(*runtime.clone_inputs(inputs))
        out = model(*runtime.clone_inputs(inputs))
        runtime.synchronize(w.device)
    cmp = compare.compare_outputs(ref, out, w.tolerances())
    return None if cmp.ok else cmp.reason


def run_confirm(w: StageContext) -> dict[str, Any]:
    p = w.loaded(need_candidate=False)
    cfg = dict(w.req["timing"])
    designs = {str(d["id"]): str(d["source"]) for d in w.req.get("confirm") or ()}
    order = [str(n) for n in w.req.get("confirm_order") or [*designs]]
    # the stop rule's target, which the parent applies to the round's blocks too (search/confirm.py)
    out: dict[str, Any] = {"order": order, "programs": {}, "target_halfwidth": float(cfg.get("target_halfwidth", 0.0))}
    t0 = time.perf_counter()
    with torch.no_grad():
        sets = w.timing_inputs(p)
        out["inputs_s"] = round(time.perf_counter() - t0, 3)
        for i, name in enumerate(order):
            entry: dict[str, Any] = {}
            fn: Any = None
            seconds: dict[str, float] = {}  # where the block's time went, per program
            t = time.perf_counter()
            try:
                if name == COMPILE:
                    runtime.reset_compiled()
                    fn = torch.compile(p.reference)
                else:
                    fn = _load(w, p, i, designs[name])
                    why = _agrees(w, p, fn)
                    if why is not None:
                        out["programs"][name] = {"error": f"no longer agrees with eager: {why}"}
                        continue
                seconds["load_and_check"] = time.perf_counter() - t
                sealed = guard.Inputs.of([x for one in sets for x in one])
                t = time.perf_counter()
                with w.compiling():
                    for k in range(3):
                        fn(*sets[k % len(sets)])
                    runtime.synchronize(w.device)
                seconds["first_calls"] = time.perf_counter() - t
                with w.hold("exclusive"):
                    t = time.perf_counter()
                    entry["fresh"] = _summary(timing.time_paired(p.reference, fn, sets, cfg, w.device, w.fresh_inputs(p, i)))
                    seconds["fresh"] = time.perf_counter() - t
                    # a warm loop: one input set, call after call, caches left as they are (not
                    # when the machine was too busy to time the fresh condition: it still is)
                    if not entry["fresh"]["busy"].get("busy"):
                        warm_cfg = {**cfg, "flush_l2": False}
                        t = time.perf_counter()
                        entry["warm"] = _summary(timing.time_paired(p.reference, fn, sets[:1], warm_cfg, w.device,
                                                                    None))
                        seconds["warm"] = time.perf_counter() - t
                if (why := sealed.tampered()) is not None:  # its warm loop was served from the inputs
                    entry = {"error": f"harness_tampering: {why}", "kind": "rejected"}
                    sets = w.timing_inputs(p)
            except StageFailure:
                raise
            except Exception as e:  # noqa: BLE001 - one program's failure is that program's result
                w.note_cuda(e)
                if w.poisoned:
                    raise StageFailure(runtime.classify_exception(e), f"confirming {name} failed: "
                                       f"{runtime.one_line(e)}", {"traceback": runtime.format_exception(e)}) from e
                entry = {"error": runtime.one_line(e), "kind": runtime.classify_exception(e)}
            finally:
                if name == COMPILE:
                    runtime.reset_compiled()
                fn = None  # one design in memory at a time (a GPU holds KernelBench-sized weights)
                runtime.free_memory()
            entry["seconds"] = {k: round(v, 3) for k, v in seconds.items()}
            out["programs"][name] = entry
    changed = w.snapshot.changes()
    if changed:
        raise StageFailure("rejected", "harness_tampering during confirmation: " + "; ".join(changed[:6]))
    out["wall_s"] = round(time.perf_counter() - t0, 3)
    return out
