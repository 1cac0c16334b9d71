"""Owns the strict policy's runtime provenance check in the worker, and the per-kernel profile
of a timed design that the agents are shown (`kernel_profile`).

Worker-side only. Under `strict`, the timed calls must run code the candidate compiled itself.
The `provenance` stage runs after timing, on calls made the way the timed ones are (the same
model object, `model(*inputs)` under no_grad, each call on fresh inputs drawn from a keyed
seed), and measures which share of them ran in the candidate's own code:

- On a GPU, torch.profiler records the CUDA kernels of each measured call; kernels whose names
  contain one of the candidate's own kernel names (its `__global__` functions and Triton `@jit`
  functions, found statically by the parent) must take OWN_TIME_FRACTION of the device time.
- On the CPU, a profile hook (`sys.setprofile`) times every call of a native function of the
  candidate's own extensions (`own_functions`), recognised by identity whatever name it is
  bound to, and every outermost library call; the own calls must take OWN_TIME_FRACTION of
  the work: own time plus the library calls that computed. Layout and metadata calls (views,
  reshapes that did not copy, size queries, `_get_tracing_state`, allocation:
  `native_calls.is_layout`) and the interpreter's time are reported, not counted.

Every measured call must run own code, and the share is over all of them. Then the candidate's
kernels are disabled on NaN-poisoned memory (Triton launches become no-ops; its native
functions have their tensor results zeroed, wherever the candidate bound them): its output
must change, or the kernels were not doing the work. A replay in which own code still ran by a
path it could not disable decides nothing, and says so.

Before timing, the untimed stages that call the candidate (correctness, integrity, shapes) run
under a counting hook (`watching`), so a failure can say whether the candidate's own code never
ran or ran only outside the measured calls (in its first calls, say, and a library op after).

Not covered, said plainly: a candidate that notices the instrumentation by timing itself (its
Python calls cost more under a profile hook) could run its kernel only then; the static checks
forbid the direct probes (`sys.getprofile`/`gettrace`, the profiler's state). On the CPU, time
inside the candidate's native function counts as its own even where that function hands the
data back to torch (`at::` calls inside it; the static `own_kernels` check requires a loop of
its own), and native code reached other than by a call from Python (an op registered with
TORCH_LIBRARY and called through `torch.ops`) is not seen, so such a candidate fails.

The profile hook and the native functions it recognises are `native_calls.py`'s (no torch).
"""

from __future__ import annotations

import contextlib
import gc
import time
import types
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.build import builds
from stratagem.domains.pytorch.worker import compare, integrity, record, runtime
from stratagem.domains.pytorch.worker.native_calls import (
    Meter,
    Tally,
    _hook_cost,
    _hooked,
    _installation,
    _so_file,
    _under,
    clock,
    own_functions,
    split_work,
)
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

OWN_TIME_FRACTION = 0.5
"""The share of the measured calls' work that must run in the candidate's own code: device time
of their kernels on a GPU; on the CPU, own native time over it plus the library calls that
computed (layout, metadata and the interpreter not counted)."""

MEASURED_CALLS = {"cpu": 5, "cuda": 3}
"""Calls measured after timing, each on fresh inputs (a GPU call is profiled on its own)."""

WATCHED = frozenset({"correctness", "integrity", "shapes"})
"""The untimed stages before timing in which calls of the candidate's own code are counted."""

PROFILE_TOP = 10
"""Kernels kept in a design's per-kernel profile (the heaviest by device time)."""


def kernel_profile(w: StageContext, model: Any, inputs: list[Any]) -> dict[str, Any]:
    """One call of a timed (warm) design under torch.profiler, on a GPU: its heaviest kernels
    as [name, microseconds] (what the agents are shown), or why there is no profile. Run after
    timing, under the exclusive lock; its output is not used, so a design that detects the
    profiler gains nothing."""
    if not w.device.startswith("cuda"):
        return {"kernels": [], "note": "per-kernel profiles are taken on GPUs only"}
    t0 = time.perf_counter()
    try:
        args = runtime.clone_inputs(inputs)
        with w.hold("exclusive"), torch.no_grad():
            torch.cuda.synchronize()
            with cuda_profile() as prof:
                w.call_candidate(model, args)
                torch.cuda.synchronize()
        kernels = sorted(_kernel_times(prof), key=lambda kt: -kt[1])
    except Exception as e:  # noqa: BLE001 - a profile that cannot be taken is only missing
        return {"kernels": [], "note": f"no profile: {runtime.one_line(e)}"}
    return {"kernels": [[name, round(us, 3)] for name, us in kernels[:PROFILE_TOP]],
            "total_us": round(sum(us for _, us in kernels), 3), "unit": "us",
            "profile_s": round(time.perf_counter() - t0, 4)}


def cuda_profile() -> Any:
    """A profiler of CUDA kernels only (Kineto). torch.autograd.profiler's, not
    torch.profiler.profile: the latter's start asks `hasattr(torch, "_inductor")`, which
    imports torch._inductor and torch._dynamo on first use (2.7 s on a CPU, 4.1-4.7 s of a
    KernelBench ReLU's timing stage on an H200), for a setting only CUDA graphs read."""
    from torch.autograd import profiler

    return profiler.profile(use_device="cuda", use_cpu=False, use_kineto=True)


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


# -- the candidate's own native code -------------------------------------------------------

def own_extensions(candidate_module: types.ModuleType | None,
                   model: torch.nn.Module | None = None) -> list[types.ModuleType]:
    """The candidate's own compiled extensions: every live extension module whose file lies in
    the extension build root (the slot's TORCH_EXTENSIONS_DIR, where only the candidate builds;
    `load_inline` does not put its modules in sys.modules, so they are found among all live
    objects), and every one the candidate's module, its classes or its model hold whose file
    lies outside the Python installation (built in a directory of its choosing). A library's
    extension (torch's, numpy's) is never its own, nor is code torch generates (Inductor's and
    Triton's, which the candidate does not hold)."""
    root = builds.build_root()
    with contextlib.suppress(OSError):
        root = root.resolve()
    found: dict[int, types.ModuleType] = {}
    for obj in gc.get_objects():
        f = _so_file(obj)
        if f is not None and _under(f, root):
            found[id(obj)] = obj
    held: list[Any] = []
    if candidate_module is not None:
        held += list(vars(candidate_module).values())
        held += [v for c in list(held) if isinstance(c, type) for v in list(vars(c).values())]
    for sub in model.modules() if model is not None else ():
        held += list(vars(sub).values())
    if held:
        elsewhere = _installation()
        for value in held:
            f = _so_file(value)
            if f is not None and not any(_under(f, d) for d in elsewhere):
                found[id(value)] = value
    return list(found.values())


# -- counting own calls before timing ------------------------------------------------------

_SEEN: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
"""Per worker: calls of the candidate's own native functions in each watched stage."""


def _strict(w: StageContext) -> bool:
    return any(str(s.get("name")) == "provenance" for s in w.req.get("stages") or ())


@contextlib.contextmanager
def watching(w: StageContext, stage: str) -> Iterator[None]:
    """Under the strict policy, count the calls of the candidate's own native functions during
    an untimed stage before timing (`WATCHED`); a no-op otherwise. Timing is never watched."""
    p = w.programs
    if stage not in WATCHED or not _strict(w) or p is None or p.candidate_module is None:
        yield
        return
    funcs = own_functions(own_extensions(p.candidate_module, p.candidate))
    if not funcs:
        yield
        return
    meter = Meter(funcs, _GHOST_CODE)
    try:
        with _hooked(meter):
            yield
    finally:
        _SEEN.setdefault(w, {})[stage] = meter.own_calls


# -- the stage -----------------------------------------------------------------------------

def _seed(w: StageContext, *path: object) -> int:
    return record.derived_seed(int(w.req["timing_seed"]), "provenance", *path)


def run_provenance(w: StageContext) -> dict[str, Any]:
    """The `provenance` stage (strict policy, after timing): the share of measured calls spent
    in the candidate's own code, then the disabled-kernel replay."""
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None and p.candidate_module is not None
    funcs = own_functions(own_extensions(p.candidate_module, p.candidate))
    before = dict(_SEEN.get(w, {}))
    if w.device.startswith("cuda"):
        details = _gpu_share(w, p, [str(n) for n in w.req.get("own_kernels", [])])
    else:
        details = _cpu_share(w, p, funcs)
    details["before_timing"] = {"own_calls": before, "stages": sorted(k for k, v in before.items() if v)}
    if not any(before.values()):
        details["before_timing"]["note"] = "no call of an own native function was counted before timing"
    _decide(details, sum(before.values()), w.device.startswith("cuda"))
    details.update(_replay(w, p, funcs))
    return details


def _cpu_share(w: StageContext, p: runtime.Programs, funcs: Mapping[int, str]) -> dict[str, Any]:
    """The own share of the work on the CPU: the candidate's own native time over it plus the
    library calls that did work; layout and metadata calls (`native_calls.is_layout`: views,
    reshapes, size queries, `_get_tracing_state`, allocation) and the interpreter's own time
    are said apart and not counted, so a thin layout step around an honest kernel passes at
    any size while a library call doing the rest still fails."""
    assert p.candidate is not None
    cost_py, cost_native = _hook_cost()
    meter = Meter(funcs, _GHOST_CODE)
    measured: list[tuple[float, float, int, float, dict[str, Tally]]] = []  # cpu, own, own calls, instr, library
    tallies: dict[str, Tally] = {}
    with torch.no_grad():
        for i in range(MEASURED_CALLS["cpu"]):
            args = w.make_inputs(p, _seed(w, i))  # made before the call: only the call is measured
            meter.reset()
            t0 = clock()
            with _hooked(meter):
                out = w.call_candidate(p.candidate, args)
            took = clock() - t0  # CPU time, as the meter's
            del out, args
            instr = max(0.0, min(took - meter.own_s, (meter.events - meter.native_events) * cost_py
                                 + meter.native_events * cost_native))
            measured.append((took, meter.own_s, meter.own_calls, instr, meter.library))
            for name, t in meter.library.items():
                total = tallies.setdefault(name, [0, 0.0, 0])
                for k in range(3):
                    total[k] += t[k]
    work_names, layout_names = split_work(tallies)
    calls: list[dict[str, Any]] = []
    for took, own, own_calls, instr, lib in measured:
        lib_s = sum(t[1] for n, t in lib.items() if n in work_names)
        calls.append({"cpu_s": took, "own_s": own, "own_calls": own_calls, "library_s": lib_s,
                      "layout_s": sum(t[1] for n, t in lib.items() if n in layout_names),
                      "instrumentation_s": instr, "own_time_fraction": _fraction(own, own + lib_s)})
    own_s = sum(c["own_s"] for c in calls)
    work_s = own_s + sum(c["library_s"] for c in calls)
    cpu_s, instr_s = sum(c["cpu_s"] for c in calls), sum(c["instrumentation_s"] for c in calls)
    library = {n: tallies[n][1] for n in work_names}
    layout = {n: tallies[n][1] for n in layout_names}
    layout_s = sum(layout.values())
    return {
        "checked": True,
        "method": "cpu: the work of each measured call, timed in CPU time by a profile hook (sys.setprofile): the "
                  "candidate's own native functions against the library calls that did work; layout and "
                  "metadata calls (views, reshapes, size queries, allocation) and the interpreter not counted",
        "counted": "own native time / (own native time + library work time)",
        "own_functions": sorted(set(funcs.values())),
        "calls_measured": len(calls),
        "calls_running_own_code": sum(1 for c in calls if c["own_calls"] > 0),
        "own_time_fraction": _fraction(own_s, work_s),
        "threshold": OWN_TIME_FRACTION,
        "own_s": own_s, "work_s": work_s, "cpu_s": cpu_s, "instrumentation_s": instr_s,
        "layout_s": layout_s, "interpreter_s": max(0.0, cpu_s - instr_s - work_s - layout_s),
        "library": [[name, s] for name, s in sorted(library.items(), key=lambda x: -x[1])[:8]],
        "layout": [[name, s] for name, s in sorted(layout.items(), key=lambda x: -x[1])[:8]],
        "calls": calls,
    }


def _fraction(own: float, total: float) -> float:
    return min(1.0, own / total) if total > 0 else 0.0


def _gpu_share(w: StageContext, p: runtime.Programs, own: list[str]) -> dict[str, Any]:
    assert p.candidate is not None
    calls: list[dict[str, Any]] = []
    kernels: dict[str, float] = {}
    with torch.no_grad():
        for i in range(MEASURED_CALLS["cuda"]):
            args = w.make_inputs(p, _seed(w, i))  # made outside the profile: only the call is attributed
            torch.cuda.synchronize()
            with cuda_profile() as prof:
                w.call_candidate(p.candidate, args)
                torch.cuda.synchronize()
            del args
            times = _kernel_times(prof)
            mine = sum(t for name, t in times if any(k in name for k in own))
            calls.append({"device_us": sum(t for _, t in times), "own_us": mine})
            for name, t in times:
                kernels[name] = kernels.get(name, 0.0) + t
    total = sum(kernels.values())
    mine = sum(t for name, t in kernels.items() if any(k in name for k in own))
    n = max(1, len(calls))
    ranked = sorted(kernels.items(), key=lambda x: -x[1])
    return {
        "checked": True,
        "method": "cuda: device time of each measured call's kernels (torch.profiler), attributed "
                  "to the candidate's own kernels by name",
        "own_kernels": own,
        "calls_measured": len(calls),
        "calls_running_own_code": sum(1 for c in calls if c["own_us"] > 0),
        "own_time_fraction": mine / total if total else 0.0,
        "threshold": OWN_TIME_FRACTION,
        "kernels": [(name, t / n) for name, t in ranked[:30]],
        "library": [[name, t / n] for name, t in ranked if not any(k in name for k in own)][:8],
        "calls": calls,
    }


def _decide(details: dict[str, Any], before: int, gpu: bool) -> None:
    """Fail the stage, saying which case it is: the own code never ran, ran only outside the
    measured calls, ran in only some of them, or did only a small share of their work."""
    n, ran = int(details["calls_measured"]), int(details["calls_running_own_code"])
    share = float(details["own_time_fraction"])
    what = "kernels" if gpu else "compiled code"
    names = details.get("own_kernels" if gpu else "own_functions") or []
    own = f"the candidate's own {what} ({', '.join(names) if names else 'none found'})"
    per_call = [(name, t if gpu else t / max(1, n) * 1e3) for name, t in details["library"]]
    top = max((t for _, t in per_call), default=0.0)
    lib = ", ".join(f"{name[:60]} {t:.3g} {'us' if gpu else 'ms'} a call"
                    for name, t in per_call[:3] if t >= 0.01 * top) or (
        "none seen" if gpu else "tensor operators and Python: no library function was called")
    where = "library kernels" if gpu else "library calls"
    after = f"the {n} calls measured after timing (fresh inputs, called as the timed calls are)"
    if ran == 0:
        details["case"] = "ran_only_outside" if before else "never_ran"
        if before:
            reason = (f"strict: {own} ran only outside the measured calls: {before} calls of it in the "
                      f"untimed stages before timing ({', '.join(details['before_timing']['stages'])}), "
                      f"none in {after}; there the work ran in {where} ({lib})")
        elif gpu:  # before timing, only extension functions are counted, not Triton launches
            reason = (f"strict: {own} never ran in the measured calls: none of {after} launched it; "
                      f"the work ran in {where} ({lib})")
        else:
            reason = (f"strict: {own} never ran: compiled and referenced, but none of {after} called "
                      f"it, nor did any call before timing; the work ran in {where} ({lib})")
    elif ran < n:
        details["case"] = "ran_in_some_calls"
        reason = (f"strict: {own} ran in only {ran} of {after}; in the others the work ran in {where} "
                  f"({lib})")
    elif share < OWN_TIME_FRACTION:
        details["case"] = "small_share"
        counted = ("the GPU time of their kernels" if gpu else
                   f"the time of their work (own native calls and library calls that computed; layout and "
                   f"metadata calls, {float(details.get('layout_s', 0.0)) * 1e3:.3g} ms, and the interpreter, "
                   f"{float(details.get('interpreter_s', 0.0)) * 1e3:.3g} ms, not counted)")
        reason = (f"strict: {own} ran on a small share of the work: {share:.1%} of {counted} in {after} "
                  f"(at least {OWN_TIME_FRACTION:.0%} is required); the rest ran in {where} ({lib})")
    else:
        details["case"] = "own_code"
        return
    raise StageFailure("rejected", reason, details)


def _replay(w: StageContext, p: runtime.Programs, funcs: Mapping[int, str]) -> dict[str, Any]:
    """The candidate called with its own kernels disabled, on NaN-poisoned memory: its output
    must no longer match the reference's."""
    assert p.candidate is not None and p.candidate_module is not None
    inputs = w.make_inputs(p, _seed(w, "replay"))
    with torch.no_grad():
        ref = w.call_reference(p.reference, runtime.clone_inputs(inputs))
    meter = Meter(funcs, _GHOST_CODE)
    with _ghosted(p.candidate_module, p.candidate, funcs) as ghost:
        integrity.poison_allocator(w.device, runtime.inputs_nbytes(inputs), w.req.get("gpu_memory_fraction"))
        with torch.no_grad(), _hooked(meter):
            out = w.call_candidate(p.candidate, runtime.clone_inputs(inputs))
    details: dict[str, Any] = {"disabled": ghost.patched, "disabled_outputs": ghost.zeroed}
    if not ghost.patched or (not ghost.triton and not ghost.zeroed):
        details["replay"] = "nothing of the candidate's own was disabled (no tensor it returned)"
        return details
    if meter.escaped:
        details["replay"] = (f"inconclusive: {meter.escaped} calls of own native functions reached them other "
                             "than through the names that were disabled")
        return details
    if compare.compare_outputs(ref, out, w.tolerances()).ok:
        raise StageFailure(
            "rejected",
            "strict: with the candidate's own kernels disabled its output is still correct: "
            "the kernels are not doing the work",
            details,
        )
    details["replay"] = "the output changed with the candidate's own kernels disabled"
    return details


class _Ghost:
    """What `_ghosted` disabled: names patched, Triton launchers among them, tensors zeroed."""

    def __init__(self) -> None:
        self.patched = 0
        self.triton = 0
        self.zeroed = 0


def _disabled(module: types.ModuleType, model: torch.nn.Module | None, funcs: Mapping[int, str],
              ghost: _Ghost) -> list[tuple[Any, str, Any]]:
    """What `_ghosted` replaces: (owner, name, stand-in); an owner is an object or a dict."""
    out: list[tuple[Any, str, Any]] = []
    extensions = {id(m): m for m in own_extensions(module, model)}
    for value in list(vars(module).values()):
        if type(value).__name__ in ("JITFunction", "Autotuner", "Heuristics") and hasattr(value, "run"):
            out.append((value, "run", lambda *a, **k: None))
            ghost.triton += 1
        elif isinstance(value, types.ModuleType) and str(getattr(value, "__file__", "")).endswith(".so"):
            extensions[id(value)] = value
    for ext in extensions.values():
        out += [(ext, name, _zeroing(fn, ghost)) for name, fn in list(vars(ext).items())
                if callable(fn) and not name.startswith("_") and not isinstance(fn, type)]
    out += [(module, name, _zeroing(v, ghost)) for name, v in list(vars(module).items()) if id(v) in funcs]
    for sub in model.modules() if model is not None else ():
        out += [(vars(sub), name, _zeroing(v, ghost)) for name, v in list(vars(sub).items()) if id(v) in funcs]
    return out


@contextlib.contextmanager
def _ghosted(module: types.ModuleType, model: torch.nn.Module | None = None,
             funcs: Mapping[int, str] | None = None) -> Iterator[_Ghost]:
    """Disable the candidate's kernels for the duration: Triton launches become no-ops, and the
    functions of its extension modules (those its module holds, and its own ones, `funcs`,
    wherever its module or its model binds them) zero their tensor results."""
    ghost = _Ghost()
    done: list[tuple[Any, str, Any]] = []
    try:
        for owner, name, stand_in in _disabled(module, model, funcs or {}, ghost):
            if isinstance(owner, dict):
                done.append((owner, name, owner[name]))
                owner[name] = stand_in
            else:
                done.append((owner, name, getattr(owner, name)))
                setattr(owner, name, stand_in)
        ghost.patched = len(done)
        yield ghost
    finally:
        for owner, name, orig in reversed(done):
            if isinstance(owner, dict):
                owner[name] = orig
            else:
                setattr(owner, name, orig)


def _zeroing(fn: Any, ghost: _Ghost | None = None) -> Any:
    def ghost_call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            if ghost is not None:
                ghost.zeroed += 1
            return torch.zeros_like(out)
        if isinstance(out, list | tuple):
            if ghost is not None:
                ghost.zeroed += sum(1 for x in out if isinstance(x, torch.Tensor))
            return type(out)(torch.zeros_like(x) if isinstance(x, torch.Tensor) else x for x in out)
        return out

    return ghost_call


_GHOST_CODE = _zeroing(None).__code__
"""The stand-in's code: an own call made from it is one the replay disabled."""
