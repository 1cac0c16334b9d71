"""Owns the worker's runtime integrity and shape-generalization checks.

Worker-side only. After correctness has passed on the harness's own inputs, `integrity`
calls the candidate in the ways cheating candidates do not survive:

- the tensors of the last correctness trial refilled in place with new values (caches keyed
  on `data_ptr`/`id`/`_version`; the correctness trials themselves already call it on fresh
  inputs at new addresses after earlier calls, which catches caches and stale CUDA graphs);
- the allocator poisoned with NaN before the call and the candidate run first, the reference
  after (stale memory, outputs not fully written, results left behind by the reference);
- a second run on the same inputs must agree with the first (races, nondeterminism);
- every output a plain tensor with real storage of its own size;
- no new threads and no new child processes (alive or exited) after a call; no harness
  function rebound and no global flag changed, after import and after every call.

`shapes` re-checks correctness with the problem's size constants changed, so code hard-wired
to the visible shapes fails: the request's variants (every constant shrunk at once), then,
where they change several, each constant alone, grown (so neither a path chosen by one size
nor a launch grid sized for the visible one can hide).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, guard, runtime
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

POISON_BYTES_MAX = 4 * 2**30
SMALL_POISON_BLOCKS = 64


def poison_allocator(device: str, nbytes_hint: int, fraction: float | None = None) -> None:
    """Fill memory the allocator will hand out next with NaN (best effort on the CPU), within
    what this process may still allocate (`fraction`: its `gpu_memory_fraction` cap; the
    device's free memory is not what a capped process can take)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        # Release every cached block first: a freed block of exactly the output's size (holding
        # an earlier call's right answer) would otherwise be a better fit than the poison.
        torch.cuda.empty_cache()
        free = runtime.free_bytes(device, fraction)
        n = int(min(POISON_BYTES_MAX, max(4 * nbytes_hint, 64 * 2**20), free * 0.5)) // 4
        big = torch.full((n,), float("nan"), device=device)
        small = [torch.full((131072,), float("nan"), device=device) for _ in range(SMALL_POISON_BLOCKS)]
        torch.cuda.synchronize()
        del big, small  # blocks stay in the caching allocator, full of NaN
    else:
        n = int(min(max(2 * nbytes_hint, 1 << 20), 256 * 2**20)) // 4
        blocks = [torch.full((n,), float("nan"))] + [torch.full((1024,), float("nan")) for _ in range(256)]
        del blocks


def check_storage(out: Any) -> str | None:
    for i, t in enumerate(runtime.tensors(out)):
        if t.is_meta:
            return f"output tensor {i} is a meta tensor with no data"
        if t.numel() == 0:
            continue
        need = (t.storage_offset() + max(1, _span(t))) * t.element_size()
        have = t.untyped_storage().nbytes()
        if t.data_ptr() == 0 or have < need:
            return f"output tensor {i} has {have} bytes of storage, needs {need}"
    return None


def _span(t: torch.Tensor) -> int:
    return 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride(), strict=True))


def child_processes() -> set[int]:
    """The pids of this process's children, running or exited and not yet reaped (Linux's
    `/proc`; an empty set elsewhere)."""
    pid = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    out: set[int] = set()
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out.update(int(c) for c in f.read().split())
        except FileNotFoundError:  # a thread that ended, or a kernel without the file
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue
            return _children_by_parent(pid)
        except OSError:
            return _children_by_parent(pid)
    return out


def _children_by_parent(pid: int) -> set[int]:
    """Children found by reading every process's parent pid (kernels without `children`)."""
    out: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            out.add(int(name))
    return out


class Checker:
    """Runs the candidate under watch: threads, tampering, storage, agreement."""

    def __init__(self, w: StageContext) -> None:
        self.w = w
        self.p = w.loaded(need_candidate=True)
        self.tol = w.tolerances()
        self.threads = guard.Threads.now()
        self.children = child_processes()
        self.log: list[dict[str, Any]] = []

    def fail(self, kind: str, check: str, reason: str) -> None:
        raise StageFailure(kind, f"{check}: {reason}", {"check": check, "passed_checks": self.log})

    def call(self, check: str, inputs: list[Any]) -> Any:
        assert self.p.candidate is not None
        with torch.no_grad():
            out = self.w.call_candidate(self.p.candidate, inputs)
        changed = self.w.snapshot.changes()
        if changed:
            self.fail("rejected", "harness_tampering", "; ".join(changed[:6]))
        left = self.threads.left_by_candidate()
        if left is not None:
            self.fail("rejected", "threads", left)
        started = sorted(p for p in child_processes() - self.children if guard.spawned_by_candidate(p))
        if started:
            self.fail("rejected", "processes", f"the candidate started {len(started)} child process(es) during "
                      f"a call that outlived it (pids {started[:4]}): work can finish after `forward` returns")
        bad = check_storage(out)
        if bad:
            self.fail("malformed", check, bad)
        return out

    def reference(self, inputs: list[Any]) -> Any:
        with torch.no_grad():
            return self.w.call_reference(self.p.reference, inputs)

    def expect(self, check: str, ref: Any, out: Any, what: str) -> None:
        c = compare.compare_outputs(ref, out, self.tol)
        if not c.ok:
            self.fail(c.kind, check, f"{what}: {c.reason}")
        self.log.append({"check": check, "max_abs_err": c.max_abs_err})

    def inputs(self, seed: int) -> list[Any]:
        return self.w.make_inputs(self.p, seed)


def run_integrity(w: StageContext) -> dict[str, Any]:
    seeds = [int(s) for s in w.req["integrity_seeds"]]
    changed = w.snapshot.changes()
    # Poisoning may start torch's CPU thread pool: do it once before the thread baseline.
    poison_allocator(w.device, 1 << 20, w.req.get("gpu_memory_fraction"))
    c = Checker(w)
    if changed:
        c.fail("rejected", "harness_tampering", "after import: " + "; ".join(changed[:6]))
    # The correctness trials already called the candidate on fresh inputs at new addresses
    # after earlier calls (caches keyed on identity, CUDA graphs replayed on stale pointers
    # fail there). Here: the very tensors of the last trial, refilled in place.
    seen = w.last_inputs if w.last_inputs is not None else c.inputs(seeds[0])
    new_vals = c.inputs(seeds[2])
    for dst, src in zip(seen, new_vals, strict=True):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
    # (the reference takes `new_vals` themselves: nothing reads them after; at KernelBench's
    # sizes every copy is 6.4 GB, so this stage holds at most three input-sized tensors)
    c.expect("refilled_inputs", c.reference(new_vals), c.call("refilled_inputs", seen),
             "the same input tensors refilled in place with new values")
    w.last_inputs = None
    del seen, new_vals
    runtime.free_memory()
    # Candidate first, on poisoned memory; the reference after.
    first = c.inputs(seeds[3])
    kept = runtime.clone_inputs(first)
    runtime.synchronize(w.device)
    poison_allocator(w.device, runtime.inputs_nbytes(first), w.req.get("gpu_memory_fraction"))
    out1 = runtime.detach_copy(c.call("candidate_first", first))
    del first
    ref = c.reference(kept)
    c.expect("candidate_first", ref, out1, "candidate run first, on poisoned memory")
    del ref
    runtime.free_memory()
    # A second run on the same inputs agrees with the first.
    poison_allocator(w.device, runtime.inputs_nbytes(kept), w.req.get("gpu_memory_fraction"))
    out2 = c.call("repeat_agrees", runtime.clone_inputs(kept))
    c.expect("repeat_agrees", out1, out2, "a second run on the same inputs")
    return {"checks": [e["check"] for e in c.log], "details": c.log, "seeds": seeds}


def run_shapes(w: StageContext) -> dict[str, Any]:
    """Correctness with the size constants changed (module globals of the reference)."""
    variants: Sequence[Mapping[str, Any]] = w.req.get("shape_variants") or []
    if not variants:
        return {"variants": [], "note": "no size constants to vary"}
    p = w.loaded(need_candidate=True)
    original = {k: getattr(p.reference_module, k) for v in variants for k in v if hasattr(p.reference_module, k)}
    variants = [*variants, *each_alone_grown(variants, original)]
    cand_cls = type(p.candidate)
    tol = w.tolerances()
    done: list[dict[str, Any]] = []
    try:
        for i, variant in enumerate(variants):
            label = ", ".join(f"{k}={v}" for k, v in variant.items())
            seed = int(w.req["init_seed"])
            t0 = time.perf_counter()
            try:  # the reference module imported again at these sizes: what it derives follows
                mod = runtime.load_module(f"{runtime.REFERENCE_MODULE}_sizes_{i}",
                                          runtime.with_constants(w.req["problem"]["source"], variant),
                                          w.workdir, f"reference_sizes_{i}.py")
                init = runtime.init_inputs(mod, seed, w.device)
                ref_model = runtime.instantiate(mod.Model, init, seed, w.device)
                inputs = runtime.make_inputs(mod, int(w.req["shape_seed"]), w.device)
                with torch.no_grad():
                    ref = ref_model(*runtime.clone_inputs(inputs))
                runtime.synchronize(w.device)
            except Exception as e:  # noqa: BLE001 - the problem does not support these sizes
                w.note_cuda(e)
                if w.poisoned:  # a device-side assert: nothing more can run in this process
                    raise StageFailure(
                        "problem_error",
                        f"the reference itself failed with size constants {label}, with an error that leaves "
                        f"the GPU unusable ({runtime.one_line(e)}): the problem does not support the sizes the "
                        "shapes stage tried. Declare the sizes it supports in the problem's settings "
                        "(`STRATAGEM = {\"shapes\": [{...}]}`) or turn the stage off (`\"shapes\": False`)",
                        {"variants": done}) from e
                done.append({"sizes": dict(variant), "skipped": f"the reference fails: {runtime.one_line(e)}"})
                continue
            t1 = time.perf_counter()
            try:
                cand = runtime.instantiate(cand_cls, init, seed, w.device)
                with torch.no_grad(), w.compiling():  # new sizes: compiled code compiles again
                    out = cand(*runtime.clone_inputs(inputs))
                runtime.synchronize(w.device)
            except (Exception, SystemExit) as e:
                w.note_cuda(e)
                _fail(runtime.classify_exception(e), f"with size constants {label}: ModelNew raised: {runtime.one_line(e)}",
                      {"variants": done, "traceback": runtime.format_exception(e)})
            t2 = time.perf_counter()
            c = compare.compare_outputs(ref, out, tol)
            if not c.ok:
                _fail(c.kind, f"with size constants {label} (code hard-wired to the visible shapes?): {c.reason}",
                      {"variants": done})
            done.append({"sizes": dict(variant), "max_abs_err": c.max_abs_err, "reference_s": round(t1 - t0, 4),
                         "candidate_s": round(t2 - t1, 4), "compare_s": round(time.perf_counter() - t2, 4)})
            del ref, out, inputs, ref_model, cand
    finally:
        # Calls at other sizes made dynamo recompile any torch.compile'd code with symbolic
        # shapes, and later calls at the problem's sizes would run those shape-generic kernels
        # (0.216 ms instead of 0.130 ms for 03_softmax on an H200). The timed program must
        # start where the `compile` baseline does: compiled for the timed shapes only.
        t3 = time.perf_counter()
        runtime.reset_compiled()
        w.compiled_state_reset = True
        reset_s = time.perf_counter() - t3
    return {"variants": done, "reset_compiled_s": round(reset_s, 4)}


def each_alone_grown(variants: Sequence[Mapping[str, Any]], visible: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Where a variant changes several size constants: each of them alone, grown by one step of
    its alignment (at most 16 and a quarter of it), the others at their visible values. A
    candidate that recognises the visible configuration by one size (`dim == 64`, from its
    constructor's arguments) and takes a path wired to another (the batch) passes when every
    size changes at once; one whose launch grid covers the visible size and masks the rest
    passes every smaller size. Both fail here."""
    keys = next((list(v) for v in variants if len(v) > 1), [])
    out: list[dict[str, Any]] = []
    for k in keys:
        v = visible.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            continue
        align = 1
        while align < 16 and v % (align * 2) == 0:
            align *= 2
        out.append({k: v + max(1, min(align, v // 4))})
    return out


def _fail(kind: str, reason: str, details: Mapping[str, Any]) -> None:
    raise StageFailure(kind, reason, details)

