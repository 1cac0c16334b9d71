"""Owns the PyTorch domain's timed stages, worker side: the candidate's paired timing (re-timed
while unstable, side-stream check, timed outputs checked afterwards) and the reference
baselines (each compiled mode compiled under the shared lock, checked with the candidates'
correctness rule, then timed paired with eager under the exclusive lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from stratagem.core import paired
from stratagem.domains.pytorch.worker import (
    compare,
    guard,
    memory,
    precision,
    provenance,
    record,
    roofline,
    runtime,
    timing,
)
from stratagem.domains.pytorch.worker.runtime import Programs
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext


OTHER_THREADS_MARGIN_CORES = 0.25
"""On the CPU, the share of a core the design's process may spend on threads other than the
ones it is timed on (`cpu_threads`: the timing thread and its intra-op pool) while its blocks
run, beyond what the reference's blocks spent: the harness's own light threads, not work."""
SIDE_STREAM_FLOOR_MS = 0.02
SIDE_STREAM_FRACTION = 0.10
"""Work finishing after the timed stream's end event beyond max(floor, fraction x runtime)
fails timing. Honest single-stream kernels measured 0.2-1.6 us on an H200."""


def retime_config(cfg: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The timing settings of attempt `attempt` (0 is the first): a re-timing follows an
    unstable result, most often an interval too wide under load, which more pairs and longer
    blocks narrow, so each one doubles the budget and the pair count of the one before."""
    if attempt <= 0:
        return cfg
    scale = 2 ** attempt
    return {**cfg, "budget_ms": float(cfg["budget_ms"]) * scale, "pairs": int(cfg.get("pairs", 40)) * scale}


def run_timing(w: StageContext) -> dict[str, Any]:
    """The candidate timed paired with the eager reference (alternating blocks under the
    exclusive lock), re-timed up to `max_retimes` times while the result is unstable, each
    re-timing with twice the previous one's budget and pairs (`retime_config`)."""
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    model = p.candidate
    phases: dict[str, float] = {}
    mark = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        phases[name] = round(phases.get(name, 0.0) + now - mark[0], 4)
        mark[0] = now

    if w.compiled_state_reset:  # compile again, outside the exclusive lock
        try:
            with w.compiling(), torch.no_grad():
                w.call_candidate(model, w.make_inputs(p, record.warm_seed(int(w.req["timing_seed"]), 0)))
        except StageFailure as e:
            raise StageFailure(e.kind, f"the candidate failed before timing: {e.reason}", e.details) from e
        runtime.free_memory()
        w.compiled_state_reset = False
    lap("compile_again")
    cfg = w.req["timing"]
    rules = _rules(cfg)
    expect = w.req.get("reference_expect_ms")
    attempts: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    kept: dict[tuple[int, int], tuple[str, Any, list[Any]]] = {}  # (attempt, slot) -> the call kept there
    attempt = 0

    def keep(slot: int, i: int, output: Any, args: Any) -> None:
        kept.pop((attempt, slot), None)  # a later draw replaces it: free the old copy first
        # the judge makes the inputs again from their seed: only a check here needs a copy
        args_copy = runtime.clone_inputs(args) if w.recorder.directory is None else []
        kept[(attempt, slot)] = (record.timed_key(attempt, i), runtime.detach_copy(output), args_copy)

    for attempt in range(1 + int(cfg.get("max_retimes", 2))):
        with torch.no_grad():
            sets = w.timing_inputs(p)
            sealed = guard.Inputs.of([t for one in sets for t in one])
            lap("inputs")
            with w.hold("exclusive"):
                try:
                    stats = timing.time_paired(p.reference, model, sets, retime_config(cfg, attempt), w.device,
                                               w.fresh_inputs(p, attempt),
                                               keep=keep, keep_count=_keep_count(w, sets[0]),
                                               reference_expect_ms=expect)
                except Exception as e:
                    w.note_cuda(e)
                    raise StageFailure(runtime.classify_exception(e),
                                       f"the candidate failed while timed: {runtime.one_line(e)}",
                                       {"traceback": runtime.format_exception(e)}) from e
            window = w.windows[-1].to_json() if w.windows else None
        lap("paired")
        ratio = paired.Ratio.from_json(stats["speedup"])
        assert ratio is not None
        stab = paired.paired_stability(ratio, stats["pair_ratios"], stats["reference"]["samples_ms"],
                                       stats["candidate"]["samples_ms"], rules, expect, stats["busy"])
        attempts.append({"attempt": attempt, "budget_ms": retime_config(cfg, attempt)["budget_ms"],
                         "pairs": stats["pairs"], "planned_pairs": stats["planned_pairs"], "stop": stats["stop"], "speedup": stats["speedup"], "stability": stab.to_json(),
                         "candidate_median_ms": stats["candidate"]["median_ms"],
                         "reference_median_ms": stats["reference"]["median_ms"], "lock": window})
        out = {"stats": stats, "stability": stab, "lock": window}
        if stab.stable or stab.busy:  # a longer timing on a busy machine is only longer
            break
    stats, stab = out["stats"], out["stability"]
    checked_calls = _check_timed_outputs(w, p, list(kept.values()))
    lap("timed_outputs")
    cand = dict(stats["candidate"])
    cand.update(method=stats["method"], input_sets=stats["input_sets"], l2_flush_bytes=stats["l2_flush_bytes"],
                warmup_calls=stats["warmup_calls"]["candidate"])
    if w.req.get("judge"):  # counted by the judge while it waits: off this path, out of the candidate's reach
        work: dict[str, Any] = {"error": "the judge did not count the reference's work"}
    else:
        work = roofline.count_work(p.reference, sets[0])
    lap("work")
    changed = [t for t in (sealed.tampered(), *w.snapshot.changes()) if t]
    if changed:
        raise StageFailure("rejected", "harness_tampering during timing: " + "; ".join(changed[:6]),
                           {"runtime": cand})
    if w.device.startswith("cuda"):
        gap, med = float(cand["unsynced_work_ms"]), float(cand["median_ms"])
        limit = max(SIDE_STREAM_FLOOR_MS, SIDE_STREAM_FRACTION * med)
        if gap > limit:  # confirm with an independent measurement before rejecting
            with w.hold("exclusive"):
                gap = min(gap, timing.unsynced_work_ms(model, sets, w.device))
            cand["unsynced_work_confirm_ms"] = gap
        if gap > limit:
            raise StageFailure(
                "rejected",
                f"side_stream: {gap:.4f} ms of work per call finished only after a device-wide "
                f"synchronize (timed call {med:.4f} ms): work escaped the timed stream",
                {"runtime": cand},
            )
    else:
        why = other_threads(stats["other_threads_cores"], int(w.req.get("cpu_threads") or 1))
        if why is not None:
            raise StageFailure("rejected", why, {"runtime": cand, "other_threads_cores": stats["other_threads_cores"]})
    lap("side_stream")
    profile = provenance.kernel_profile(w, model, sets[0]) if w.device.startswith("cuda") else None
    lap("profile")
    return {
        "phases_s": phases,
        **({"profile": profile} if profile is not None else {}),
        "runtime": cand,
        "reference": stats["reference"],
        "speedup": stats["speedup"],
        "pair_ratios": stats["pair_ratios"],
        "pairs": stats["pairs"],
        "planned_pairs": stats["planned_pairs"],
        "stop": stats["stop"],
        "calls_per_block": stats["calls_per_block"],
        "stability": stab.to_json(),
        "attempts": attempts,
        "lock": out["lock"],
        "timed_outputs_checked": checked_calls,
        "timing_wall_s": stats["wall_s"],
        "busy": stats["busy"],
        "work": work,
    }

def other_threads(cores: Mapping[str, float], threads: int) -> str | None:
    """Why a CPU timing is void because the candidate worked beyond the threads it is timed on
    (`cores`: each program's CPU on threads other than the timing thread, in cores, over its
    blocks; `threads`: `cpu_threads`), or None. A pool of its own, the inter-op pool, work
    left running after `forward` returned: the ratio is one of `threads` threads by design, so
    CPU spent elsewhere is a speedup bought with cores the reference was not given."""
    cand, ref = float(cores.get("candidate", 0.0)), float(cores.get("reference", 0.0))
    allowed = threads - 1 + OTHER_THREADS_MARGIN_CORES
    if cand <= allowed or cand - ref <= OTHER_THREADS_MARGIN_CORES:
        return None
    return (f"other_threads: the candidate kept {cand:.2f} cores busy beyond the timing thread while timed "
            f"(the reference {ref:.2f}; timed on {threads} thread(s), so at most {allowed:.2f}): work ran "
            "on threads the timing does not give it, or after `forward` returned; do all the work in the call, "
            "on the timing thread (and torch's intra-op threads)")


def run_baseline(w: StageContext) -> dict[str, Any]:
    """Eager timed alone, and each compiled mode paired with eager: each mode is compiled
    first (its first calls, under the shared lock and the compile budget), then timed, and
    re-timed like a candidate while unstable (`retime_config`, up to `max_retimes` times):
    every speedup over that mode is chained through its ratio, so noise kept there would be
    shown as a result in every design's numbers. Each timing's attempts are kept."""
    p = w.loaded(need_candidate=False)
    modes = list(w.req.get("baselines") or ["eager"])
    cfg = w.req["timing"]
    rules = _rules(cfg)
    expect = w.req.get("reference_expect_ms")
    out: dict[str, Any] = {}
    with torch.no_grad():
        sets = w.timing_inputs(p)
        for mode in modes:
            if mode == "eager":
                continue
            try:
                t0 = time.perf_counter()
                fn = _compiled(p.reference, mode)
                with w.compiling():
                    for i in range(3):  # compile; CUDA graphs record on a later call
                        fn(*sets[i % len(sets)])
                    runtime.synchronize(w.device)
                t1 = time.perf_counter()
                with w.hold("shared"):
                    checked = _baseline_correctness(w, p, fn)
                t2 = time.perf_counter()
                attempts: list[dict[str, Any]] = []
                for attempt in range(1 + int(cfg.get("max_retimes", 2))):
                    with w.hold("exclusive"):
                        stats = timing.time_paired(p.reference, fn, sets, retime_config(cfg, attempt), w.device,
                                                   w.fresh_inputs(p, attempt), reference_expect_ms=expect)
                    ratio = paired.Ratio.from_json(stats["speedup"])
                    assert ratio is not None
                    stab = paired.paired_stability(ratio, stats["pair_ratios"], stats["reference"]["samples_ms"],
                                                   stats["candidate"]["samples_ms"], rules, expect, stats["busy"])
                    attempts.append(_attempt(attempt, cfg, stats["candidate"], stab, stats["speedup"]))
                    if stab.stable or stab.busy:
                        break
                out[mode] = {**stats["candidate"], "vs_eager": stats["speedup"], "stability": stab.to_json(),
                             "correctness": checked, "method": stats["method"], "pairs": stats["pairs"],
                             "attempts": attempts, "lock": w.windows[-1].to_json() if w.windows else None,
                             "cost_s": {"compile": round(t1 - t0, 3), "check": round(t2 - t1, 3),
                                        "timing": round(time.perf_counter() - t2, 3)}}
                if "eager" not in out:
                    out["eager"] = {**stats["reference"], "stability": _single(stats["reference"], rules, expect,
                                                                               stats["busy"]),
                                    "method": stats["method"], "paired_with": mode}
            except Exception as e:
                w.note_cuda(e)
                if w.poisoned:
                    raise StageFailure("problem_error", f"timing the reference failed: {runtime.one_line(e)}",
                                       {"traceback": runtime.format_exception(e)}) from e
                out[mode] = {"error": runtime.one_line(e)}
            finally:
                runtime.reset_compiled()
        if "eager" not in out:  # eager alone (no compiled mode asked for, or none compiled)
            attempts = []
            for attempt in range(1 + int(cfg.get("max_retimes", 2))):
                try:
                    with w.hold("exclusive"):
                        stats = timing.time_callable(p.reference, sets, retime_config(cfg, attempt), w.device,
                                                     w.fresh_inputs(p, attempt))
                except Exception as e:
                    w.note_cuda(e)
                    raise StageFailure(runtime.problem_kind(e), f"timing the reference failed: {runtime.one_line(e)}",
                                       {"traceback": runtime.format_exception(e)}) from e
                single = paired.Stability.from_json(_single(stats, rules, expect, stats.get("busy")))
                attempts.append(_attempt(attempt, cfg, stats, single, None))
                if single.stable or single.busy:
                    break
            out["eager"] = {**stats, "stability": single.to_json(), "attempts": attempts,
                            "lock": w.windows[-1].to_json() if w.windows else None}
    return {"baselines": {m: out[m] for m in ["eager", *[x for x in modes if x != "eager"]] if m in out}}

def _attempt(n: int, cfg: Mapping[str, Any], stats: Mapping[str, Any], stab: paired.Stability,
             vs_eager: Any) -> dict[str, Any]:
    """One timing attempt of a baseline mode, as kept in its details."""
    return {"attempt": n, "budget_ms": retime_config(dict(cfg), n)["budget_ms"], "median_ms": stats.get("median_ms"),
            "vs_eager": vs_eager, "stability": stab.to_json()}


def _keep_count(w: StageContext, inputs: list[Any]) -> int:
    """Timed calls (one per randomly drawn block) whose outputs are checked afterwards, by
    the rule the memory plan counts (`memory.kept_timed_calls`)."""
    free = (runtime.free_bytes(w.device, w.req.get("gpu_memory_fraction")) if w.device.startswith("cuda")
            else 2 * 2**30)
    return memory.kept_timed_calls(runtime.inputs_nbytes(inputs), free)

def _check_timed_outputs(w: StageContext, p: Programs, kept: list[tuple[str, Any, list[Any]]]) -> list[str]:
    """The outputs of timed calls drawn at random, against the reference on the very same
    inputs: a candidate honest only outside timing (by call count, elapsed time, stream or
    profiler state) fails here. With a judge they are only recorded: the judge, which makes
    the same inputs from their seeds, compares them after the worker ends. Returns the calls
    checked or recorded (`timed-ATTEMPT-CALL`)."""
    checked: list[str] = []
    if w.recorder.directory is not None:
        for key, got, _args in kept:
            w.recorder.save(key, got)
            checked.append(key)
        return checked
    with w.hold("shared"), torch.no_grad():
        for key, got, args in kept:
            ref = w.call_reference(p.reference, runtime.clone_inputs(args))
            cmp = compare.compare_outputs(ref, got, w.tolerances())
            if not cmp.ok:
                raise StageFailure(cmp.kind, f"timed_outputs: the output of timed call {key} differs from the "
                                   f"reference on the same inputs (honest only outside timing?): {cmp.reason}",
                                   {"checked": checked + [key]})
            checked.append(key)
    return checked


def _baseline_correctness(w: StageContext, p: Programs, fn: Callable[..., Any]) -> dict[str, Any]:
    """A compiled baseline held to the candidates' rule, on the request's seeds: `ok`, and
    the failing trial's reason, or the largest errors."""
    trials = []
    w.evidence_override = precision.INHERITED  # the reference's own operators, compiled
    for seed in w.req["seeds"]:
        inputs = w.make_inputs(p, int(seed))
        ref_out = p.reference(*runtime.clone_inputs(inputs))
        out = fn(*runtime.clone_inputs(inputs))
        runtime.synchronize(w.device)
        cmp = w.judge(ref_out, out, inputs, report_anchor=False)
        trials.append({"seed": int(seed), **cmp.to_json()})
        if not cmp.ok:
            return {"ok": False, "reason": f"trial seed {seed}: {cmp.reason}", "trials": trials, "mode": w.mode()}
    return {"ok": True, "trials": trials, "mode": w.mode(),
            "max_abs_err": max((t["max_abs_err"] for t in trials), default=0.0)}


def _rules(cfg: Mapping[str, Any]) -> paired.StabilityRules:
    return paired.stability_rules(cfg.get("stability"))


def _single(stats: Mapping[str, Any], rules: paired.StabilityRules, expect: Any, busy: Any = None) -> dict[str, Any]:
    return paired.single_stability(stats["samples_ms"], rules, float(expect) if expect else None, busy).to_json()


def _compiled(model: torch.nn.Module, mode: str) -> Callable[..., Any]:
    if mode == "eager":
        return model
    runtime.reset_compiled()
    if mode == "compile":
        return torch.compile(model)
    return torch.compile(model, mode=mode)
