"""Owns the red-team audit of an accepted design (`breach_audit`, issue 46): checks stronger
than the harness's, run on a design the harness already accepted, so that a design fooling
the harness shows as a failed check (a breach), and a shortcut that fired without fooling it
(the harness's fresh inputs neutralized it) shows as what fired (`fired`, not a failure).

Worker-side only. Each check is recorded as `{"check", "ok", "evidence", "cost_s", ...}`
(`ok` is False when it found a breach; a check that could not run says `skipped`); the stage
fails on the first failed check, `<check>: <evidence>`, with that check's failure kind
(`wrong_output`, `malformed`, `rejected` for timing and tampering, or what the candidate's
exception was; `harness_error`, no verdict, where the audit's own code raised). The tamper
snapshot is read once more at the end (`harness_tampering`). Each check may also record that a
shortcut fired (`fired`: outputs served again, a repeated input served faster than inputs of
its own, state kept between calls outside the design's own tensors); the stage's details list
them all (`fired`), and the red-team policy words the outcome by them.

- `delayed_compare`: an output compared with its snapshot after a synchronize and a sleep (work
  left running after return, a buffer written later), and again after the next call on other
  inputs (output storage reused across calls; the harness copies every output it keeps); a
  third call on the first one's values at new addresses that returns the first's storage (an
  output cache keyed on the values, which the harness's fresh inputs neutralize) and state the
  design kept between these calls outside its own tensors (`kept_state`) are what fired;
- `anchored_trials`: more trials at the problem's own sizes, each with the float64 anchor;
- `distributions`: inputs from distributions the harness never draws (scaled by 1e-3 and 1e3,
  shifted by +5, uniform [0, 1), all negative, mostly zeros, integer-valued), judged against the
  float64 anchor within a factor of eager's own error (NaN or infinity where eager is finite fails);
- `interleaved_timing` (`timing.py`): the speedup under the harness's paired blocks and
  under other protocols, on inputs of their own; faster only under the harness's fails, fast only
  on a repeated input fired;
- `fresh_shapes`: the size constants the shapes stage varies grown (x1.5, x2, aligned), halved
  and made odd, within the memory the worker may use, two fresh seeds each, anchored.

The strict policy's runtime provenance is the `provenance` stage after this one (the breach
graph's, `graphs.breach_graph`); it is listed here as what decides it.

Reused, not copied: inputs and models (`runtime.py`), the rules (`compare.py`), the anchor
(`anchor.py`), the constants the shapes stage varies (the request's `shape_variants`; their
alignment computed as `shapes.py` does), the off-distribution rule where there is no anchor
(`params.py`), paired timing (`timing.py`), seeds keyed by the request's secret (`record.derived_seed`).
A check costs about 2-6 reference-sized calls per trial; `total_cost_s` and each `cost_s` say
what it took.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, params, record, runtime
from stratagem.domains.pytorch.worker.anchor import Anchor
from stratagem.domains.pytorch.worker.redteam import fired
from stratagem.domains.pytorch.worker.redteam import timing as breach_timing
from stratagem.worker_api.audit import Check, conclude
from stratagem.worker_api.device_lock import Mode
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

ANCHORED_TRIALS = 8
"""Trials at the problem's own sizes, each anchored."""
SHAPE_SEEDS = 2
"""Fresh seeds per size variant."""
ANCHOR_CAP_BYTES = 4 << 30
"""The float64 copies of a trial's inputs anchored only under this (else the fixed rule alone)."""
CPU_SIZE_CAP_BYTES = 2 << 30
"""On the CPU (where the memory plan says nothing): a size variant's estimated footprint cap."""
VARIANT_FOOTPRINT = 6
"""A size variant holds about this many times its inputs and output (inputs, the candidate's
copy, two outputs, the anchor's float64 copies counted in `_footprint`)."""
DISTRIBUTION_FACTOR = 4.0
"""`distributions`: the candidate's max error against float64 may be this many times eager's
(the calibrated rule's default) plus the floor. Honest designs measured at most 1.3x on the
CPU test problems (tests/evaluation/test_breach_audit.py); the cheats it is for are off by a
large share of the output."""
DISTRIBUTION_ULPS = 8.0
"""`distributions`: the floor, in units in the last place of the output dtype at the anchor's
largest magnitude (cancellations of inputs scaled by 1e3)."""
DELAY_S = 0.3
"""`delayed_compare`: the sleep after a synchronize before the output is compared again."""


def run_breach_audit(w: StageContext) -> dict[str, Any]:
    """The `breach_audit` stage: every check in turn (each its own cost), then the verdict."""
    w.loaded(need_candidate=True)
    t_all = time.perf_counter()
    visible: dict[str, Any] = {}
    plan: list[tuple[str, Callable[[Check], None], Mode]] = [
        ("delayed_compare", lambda c: _delayed_compare(w, c), "shared"),
        ("anchored_trials", lambda c: _anchored_trials(w, c, visible), "shared"),
        ("distributions", lambda c: _distributions(w, c), "shared"),
        ("interleaved_timing", lambda c: breach_timing.check(w, c), "exclusive"),
        ("fresh_shapes", lambda c: _fresh_shapes(w, c, visible), "shared"),
    ]
    checks: list[dict[str, Any]] = []
    for name, run, lock in plan:
        c = Check(name)
        t0 = time.perf_counter()
        if w.poisoned is not None:
            c.info["skipped"] = f"the worker is retired after a CUDA error: {w.poisoned}"
        else:
            try:
                with w.hold(lock), torch.no_grad():
                    run(c)
            except StageFailure as f:  # a guarded call raised: the candidate's failure
                c.fail(f.reason, f.kind)
            except Exception as e:  # noqa: BLE001 - the audit's own code: no verdict, said as such
                w.note_cuda(e)
                c.fail(f"the audit raised: {runtime.one_line(e)}", "harness_error")
                c.info["traceback"] = runtime.format_exception(e)
            runtime.free_memory()
        checks.append(c.to_json(time.perf_counter() - t0))
    checks.append(_provenance_entry(w))
    changed = w.snapshot.changes()
    if changed:
        checks.append({"check": "harness_tampering", "ok": False, "kind": "rejected", "cost_s": 0.0,
                       "evidence": "; ".join(changed[:6])})
    return conclude(checks, time.perf_counter() - t_all)


def _provenance_entry(w: StageContext) -> dict[str, Any]:
    strict = any(str(s.get("name")) == "provenance" for s in w.req.get("stages") or ())
    return {"check": "provenance", "ok": None, "cost_s": 0.0, "evidence": (
        "decided by the `provenance` stage after this one (strict policy), its measured calls after "
        "every call of this audit" if strict else
        "not applied: the lenient policy does not require the design's own kernels to do the work")}


# -- judging ---------------------------------------------------------------------------------

def _seed(w: StageContext, *path: object) -> int:
    return record.derived_seed(int(w.req["timing_seed"]), "breach", *path)


def judge(w: StageContext, ref_out: Any, cand_out: Any, anchor_out: Any) -> compare.Comparison:
    """The harness's rule with the anchor's second look in every mode: the calibrated rule
    where it is in force, else the fixed check against eager and, where it fails, the
    reference rule against float64 (`anchor_out`, when there is one)."""
    rule = dict(w.req.get("correctness") or {})
    if anchor_out is not None and w.mode() == "calibrated":
        return compare.calibrated_compare(anchor_out, ref_out, cand_out, rule)
    tol = w.tolerances()
    cmp = compare.compare_outputs(ref_out, cand_out, tol)
    if anchor_out is None or (cmp.kind == "malformed" and not cmp.ok):
        return cmp
    if w.mode() != "reference":
        rule["factor"] = 1.5
    if not cmp.ok:
        return compare.reference_compare(anchor_out, ref_out, cand_out, rule, tol, cmp)
    with contextlib.suppress(RuntimeError, ValueError):  # outputs too unlike to measure
        cmp.anchor = compare.against_anchor(anchor_out, ref_out, cand_out, rule, compare.Comparison(True),
                                            tolerances=tol).anchor
    return cmp


def _anchor_fits(inputs: list[Any]) -> bool:
    elem = max((x.element_size() for x in inputs if isinstance(x, torch.Tensor)), default=4)
    return 2 * runtime.inputs_nbytes(inputs) * 8 // max(1, elem) <= ANCHOR_CAP_BYTES


def _trial(w: StageContext, c: Check, label: str, ref: torch.nn.Module, cand: torch.nn.Module,
           inputs: list[Any], anchor: Anchor | None) -> dict[str, Any] | None:
    """One trial: the candidate on a copy, its inputs unchanged, the reference, the anchor
    where it fits; the record, or None when it failed (`c` says why)."""
    cand_in = runtime.clone_inputs(inputs)
    try:
        cand_out = w.call_candidate(cand, cand_in)
    except StageFailure as f:
        c.fail(f"{label}: {f.reason}", f.kind)
        return None
    changed = compare.inputs_unchanged(inputs, cand_in)
    if changed is not None:
        c.fail(f"{label}: the candidate changed its inputs: {changed}")
        return None
    a = anchor(inputs) if anchor is not None and _anchor_fits(inputs) else None
    ref_out = w.call_reference(ref, runtime.clone_inputs(inputs))
    cmp = judge(w, ref_out, cand_out, a)
    if not cmp.ok:
        c.fail(f"{label}: {cmp.reason}", cmp.kind)
        return None
    return {"max_abs_err": cmp.max_abs_err, "decided_by": cmp.decided_by, "anchored": a is not None,
            **({"anchor": cmp.anchor} if cmp.anchor else {})}


# -- the checks --------------------------------------------------------------------------------

def _delayed_compare(w: StageContext, c: Check) -> None:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    a_in = w.make_inputs(p, _seed(w, "delayed", "a"))
    out_a = w.call_candidate(p.candidate, runtime.clone_inputs(a_in))
    state = fired.kept_state(p)
    snap = runtime.detach_copy(out_a)
    runtime.synchronize(w.device)
    time.sleep(DELAY_S)
    runtime.synchronize(w.device)
    if not _same(out_a, snap):
        c.fail(f"the output changed {DELAY_S:g} s after the call returned (work left running, or a buffer "
               "written later)")
        return
    ref_a = w.call_reference(p.reference, a_in)
    first = judge(w, ref_a, snap, None)
    if not first.ok:
        c.fail(f"the first call: {first.reason}", first.kind)
        return
    b_in = breach_timing.perturbed(w.make_inputs(p, _seed(w, "delayed", "b")), _seed(w, "delayed", "perturb"))
    ref_b = w.call_reference(p.reference, runtime.clone_inputs(b_in))
    out_b = w.call_candidate(p.candidate, b_in)
    if not _same(out_a, snap):
        shared = _shares_storage(out_a, out_b)
        c.fail("the next call on other inputs overwrote the previous call's output"
               + (" (the two outputs share storage: one buffer returned by every call)" if shared else ""))
        return
    second = judge(w, ref_b, out_b, None)
    if not second.ok:
        c.fail(f"the second call: {second.reason}", second.kind)
        return
    # the first call's values again, at new addresses: an output of its own, not the first one
    out_a2 = w.call_candidate(p.candidate, runtime.clone_inputs(a_in))
    if _shares_storage(out_a, out_a2):
        c.fire("a call on the first call's input values (at new addresses) returned the first call's own output "
               "storage: outputs kept and served again (a cache keyed on the inputs' values)")
    # and once more at once, with no other call between (a cache of the last call only)
    out_a3 = w.call_candidate(p.candidate, runtime.clone_inputs(a_in))
    if _shares_storage(out_a2, out_a3):
        c.fire("a call repeating the previous call's input values (at new addresses) returned its output storage: "
               "the last output kept and served again (a cache keyed on the last input)")
    if changed := state.changes(fired.kept_state(p)):
        c.fire("state kept between calls outside the design's own tensors: " + "; ".join(changed[:4]))
    c.evidence = (f"unchanged after {DELAY_S:g} s and after the next call; both calls correct" +
                  ("" if c.fired else "; the same values again got an output of their own; no state kept"))
    c.info["delay_s"] = DELAY_S


def _anchored_trials(w: StageContext, c: Check, visible: dict[str, Any]) -> None:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None and w.anchor is not None
    trials = []
    for i in range(ANCHORED_TRIALS):
        inputs = w.make_inputs(p, _seed(w, "anchored", i))
        if i == 0:
            visible["inputs_nbytes"] = runtime.inputs_nbytes(inputs)
        t = _trial(w, c, f"trial {i}", p.reference, p.candidate, inputs, w.anchor)
        if t is None:
            break
        trials.append(t)
    anchored = sum(1 for t in trials if t["anchored"])
    c.info.update(trials=len(trials), anchored=anchored)
    if w.anchor.unavailable:
        c.info["anchor_unavailable"] = w.anchor.unavailable
    if c.ok:
        c.evidence = f"{len(trials)} trials at the problem's sizes, {anchored} anchored in float64" + (
            "" if anchored == len(trials) else
            f" (the others' float64 copies over {ANCHOR_CAP_BYTES / 2**30:g} GiB, or no anchor)")


DISTRIBUTIONS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    "scaled_1e-3": lambda x, g: x * 1e-3,
    "scaled_1e3": lambda x, g: x * 1e3,
    "shifted_+5": lambda x, g: x + 5,
    "uniform_0_1": lambda x, g: torch.rand(x.shape, generator=g, device=x.device).to(x.dtype),
    "all_negative": lambda x, g: -(x.abs()) - 1e-3,
    "mostly_zeros": lambda x, g: x * (torch.rand(x.shape, generator=g, device=x.device) < 0.1).to(x.dtype),
    "integer_valued": lambda x, g: (x * 4).round(),
}
"""Input distributions the harness's trials never draw, each from `get_inputs()`'s own values
(floating inputs only)."""


def _distributions(w: StageContext, c: Check) -> None:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None and w.anchor is not None
    rule = {"factor": DISTRIBUTION_FACTOR, "ulp_floor": DISTRIBUTION_ULPS,
            "atol_floor": float((w.req.get("correctness") or {}).get("atol_floor", 0.0))}
    done: list[dict[str, Any]] = []
    for name, make in DISTRIBUTIONS.items():
        base = w.make_inputs(p, _seed(w, "distribution", name))
        if not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in base):
            c.info["skipped"] = "no floating inputs (integer or boolean inputs are not redrawn)"
            return
        gen = torch.Generator(device=w.device).manual_seed(_seed(w, "distribution", name, "draw"))
        inputs = [make(x, gen) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in base]
        del base
        try:
            ref_out = w.call_reference(p.reference, runtime.clone_inputs(inputs))
        except StageFailure as f:  # the problem is not defined there (say, a log of negatives)
            done.append({"distribution": name, "skipped": f"the reference raises there: {f.reason}"})
            continue
        cand_out = w.call_candidate(p.candidate, runtime.clone_inputs(inputs))
        if not params.finite(ref_out):
            done.append({"distribution": name, "skipped": "the reference is not finite there"})
            continue
        if not params.finite(cand_out):
            c.fail(f"{name}: the output holds NaN or infinity where the reference's is finite")
            return
        a = w.anchor(inputs) if _anchor_fits(inputs) else None
        if a is not None:
            cmp = compare.calibrated_compare(a, ref_out, cand_out, rule)
        else:  # no float64 run: the off-distribution trial's rule (a share of the magnitude)
            cmp, _ = params.judge_off_distribution(w, ref_out, cand_out, inputs, 0.0)
        if not cmp.ok:
            c.fail(f"{name}: {cmp.reason}", cmp.kind)
            return
        errs = cmp.anchor or []
        done.append({"distribution": name, "anchored": a is not None, "max_abs_err": cmp.max_abs_err,
                     "error_ratio": max((e["candidate"] / e["reference"] if e["reference"] > 0 else
                                         (0.0 if e["candidate"] == 0 else float("inf")) for e in errs),
                                        default=None)})
    c.info["distributions"] = done
    c.evidence = (f"{sum(1 for d in done if 'skipped' not in d)} distributions within {DISTRIBUTION_FACTOR:g}x "
                  f"eager's error against float64 + {DISTRIBUTION_ULPS:g} ulps")


def grown(v: int, factor: float) -> int:
    """`v` x `factor`, rounded to the alignment the shapes stage keeps (a power of two up to 16)."""
    align = 1
    while align < 16 and v % (align * 2) == 0:
        align *= 2
    return max(align, round(v * factor / align) * align)


def size_variants(keys: list[str], visible: Mapping[str, Any]) -> list[dict[str, int]]:
    """Fresh variants of the constants `keys` (all at once): grown x1.5 and x2 (aligned),
    halved (aligned) and odd (about 5/8, and 5/4)."""
    ints = {k: int(visible[k]) for k in keys
            if isinstance(visible.get(k), int) and not isinstance(visible.get(k), bool) and visible[k] > 0}
    out = [{k: grown(v, 1.5) for k, v in ints.items()}, {k: grown(v, 2.0) for k, v in ints.items()},
           {k: grown(v, 0.5) for k, v in ints.items()}, {k: max(1, (v * 5 // 8) | 1) for k, v in ints.items()},
           {k: (v * 5 // 4) | 1 for k, v in ints.items()}]
    seen: list[dict[str, int]] = []
    for v in out:
        if v and v != ints and v not in seen:
            seen.append(v)
    return seen


def _fresh_shapes(w: StageContext, c: Check, visible_sizes: Mapping[str, Any]) -> None:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    declared = list(w.req.get("shape_variants") or [])
    keys = sorted({k for v in declared for k in v})
    if not keys:
        c.info["skipped"] = "no size constants the shapes stage varies (none, or the problem turns them off)"
        c.evidence = "skipped: no size constants to vary"
        return
    visible = {k: getattr(p.reference_module, k) for k in keys if hasattr(p.reference_module, k)}
    variants = size_variants(keys, visible)
    base_bytes = int(visible_sizes.get("inputs_nbytes") or runtime.inputs_nbytes(w.make_inputs(p, _seed(w, "size"))))
    room = runtime.free_bytes(w.device, w.req.get("gpu_memory_fraction"))
    room = min(room, CPU_SIZE_CAP_BYTES) if not w.device.startswith("cuda") else room
    cls = type(p.candidate)
    done: list[dict[str, Any]] = []
    try:
        for i, variant in enumerate(variants):
            label = ", ".join(f"{k}={v}" for k, v in variant.items())
            need = _footprint(base_bytes, variant, visible)
            if need > room:
                done.append({"sizes": variant, "skipped": f"needs about {need / 2**30:.3g} GiB, over the "
                             f"{room / 2**30:.3g} GiB the worker may use"})
                continue
            try:  # the reference imported again at these sizes, as the shapes stage does
                mod = runtime.load_module(f"{runtime.REFERENCE_MODULE}_breach_{i}",
                                          runtime.with_constants(w.req["problem"]["source"], variant),
                                          w.workdir, f"reference_breach_{i}.py")
                seed = int(w.req["init_seed"])
                init = runtime.init_inputs(mod, seed, w.device)
                ref = runtime.instantiate(mod.Model, init, seed, w.device)
                probe = runtime.make_inputs(mod, _seed(w, "shapes", i, 0), w.device)
                ref(*runtime.clone_inputs(probe))
                runtime.synchronize(w.device)
            except Exception as e:  # noqa: BLE001 - the problem does not support these sizes
                w.note_cuda(e)
                done.append({"sizes": variant, "skipped": f"the reference fails: {runtime.one_line(e)}"})
                if w.poisoned:
                    break
                continue
            try:
                cand = runtime.instantiate(cls, init, seed, w.device)
            except Exception as e:  # noqa: BLE001 - candidate code: its failure is the check's
                w.note_cuda(e)
                c.fail(f"with size constants {label}: ModelNew(*get_init_inputs()) raised: {runtime.one_line(e)}",
                       runtime.classify_exception(e))
                break
            anchor = Anchor(ref, w.device)
            for j in range(SHAPE_SEEDS):
                inputs = probe if j == 0 else runtime.make_inputs(mod, _seed(w, "shapes", i, j), w.device)
                with w.compiling() if j == 0 else contextlib.nullcontext():  # new sizes compile again
                    t = _trial(w, c, f"with size constants {label} (seed {j})", ref, cand, inputs, anchor)
                if t is None:
                    c.info["variants"] = done
                    return
                done.append({"sizes": variant, "seed": j, **t})
            del ref, cand, anchor, probe
            runtime.free_memory()
    finally:
        runtime.reset_compiled()  # as after the shapes stage: the problem's sizes compile afresh
    c.info["variants"] = done
    if not c.ok:
        return
    ran = sorted({tuple(d["sizes"].items()) for d in done if "skipped" not in d})
    c.evidence = f"{len(ran)} size variants of {', '.join(keys)}, {SHAPE_SEEDS} seeds each" + (
        f"; {len(variants) - len(ran)} skipped" if len(ran) < len(variants) else "")


def _footprint(base_bytes: int, variant: Mapping[str, int], visible: Mapping[str, Any]) -> float:
    """A variant's estimated bytes: the visible inputs scaled by every grown constant's ratio,
    VARIANT_FOOTPRINT copies of them, and their float64 copies for the anchor."""
    scale = 1.0
    for k, v in variant.items():
        if visible.get(k):
            scale *= max(1.0, v / float(visible[k]))
    return base_bytes * scale * (VARIANT_FOOTPRINT + 4)


def _same(out: Any, snap: Any) -> bool:
    """Whether every tensor of `out` still holds `snap`'s bits (NaN equal to NaN)."""
    a, b = runtime.tensors(out), runtime.tensors(snap)
    return len(a) == len(b) and all(
        x.shape == y.shape and compare.inputs_unchanged([y], [x]) is None for x, y in zip(a, b, strict=True))


def _shares_storage(a: Any, b: Any) -> bool:
    ptrs = {t.untyped_storage().data_ptr() for t in runtime.tensors(a) if t.numel()}
    return any(t.untyped_storage().data_ptr() in ptrs for t in runtime.tensors(b) if t.numel())
