"""Owns the PyTorch domain's worker: the Worker (the correctness rule in force, the load stage,
guarded calls), the table of stages (`STAGES`) and the request driver.

Worker-side only. The stage modules (correctness, integrity, timed, breach_audit, ...) take the
Worker, most as a narrow `context.StageContext`, and are imported when their stage first runs
(`stage`): a worker, and the judge that builds one, loads only the stages it runs. `run_request` drives the requested stages
through the graph rules of the parent (a failed stage skips its dependents) and reports each
result as it finishes. An exception in candidate code is a failed stage; a CUDA error also
retires the worker: every later stage is skipped, since the CUDA context can no longer be
trusted.

Device use (`device_use.py`): every stage holds the device lock shared, the timed sections
exclusive; `load_inline` builds (`build/inline_builds.py`, installed before the candidate is imported)
hold no lock on a GPU, and unchanged sources load from the shared build cache.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch.build import builds, inline_builds
from stratagem.domains.pytorch.worker import (
    compare,
    environment,
    guard,
    memory,
    precision,
    record,
    runtime,
)
from stratagem.domains.pytorch.worker.device_use import watch_compile_modes
from stratagem.domains.pytorch.worker.referee import Referee, device_request
from stratagem.domains.pytorch.worker.runtime import Programs
from stratagem.worker_api import stages
from stratagem.worker_api.stages import Emit, StageFailure

ANCHOR_REPORT_BYTES = 1 << 30
"""The fixed rule anchors its first trial only while the float64 copies of its inputs stay
under this (the anchor decides nothing there; it is reported)."""


def _elem(inputs: list[Any]) -> int:
    """The element size of the inputs' tensors (bytes, the largest)."""
    return max((x.element_size() for x in inputs if isinstance(x, torch.Tensor)), default=4)


class Worker(Referee):
    """State shared by the stages of one request (what the judge shares: `Referee`)."""

    def __init__(self, request: Mapping[str, Any], workdir: Path, emit: Emit | None = None,
                 record_dir: Path | None = None) -> None:
        guard.watch_starts(workdir)  # who starts each thread, first: before any of the harness's threads
        super().__init__(request, emit)
        self.recorder = record.Recorder(record_dir if request.get("judge") else None, str(request["device"]),
                                        lambda: self.phase("wait"))
        """The candidate outputs the judge checks (record.py)."""
        self.workdir = workdir
        watch_compile_modes()  # the harness's own wrapper, in place before the snapshot sees torch.compile
        self.snapshot = guard.Snapshot()  # before any candidate code is imported
        self.last_inputs: list[Any] | None = None
        self.memory_plan: dict[str, Any] | None = None
        """The evaluation's memory plan (`memory.plan`, made at load on a GPU)."""
        self.compiled_state_reset = False
        """Set by the shapes stage: the candidate's compiled code must compile again."""
        self.cleared_builds: list[str] = []
        """Dead builds' batons removed from the build root (`claim_builds`)."""

    # -- stages ---------------------------------------------------------------------------

    def stage_load(self) -> dict[str, Any]:
        programs = self.load_reference(self.workdir)
        self.snapshot.watch(runtime.REFERENCE_MODULE, programs.reference_module)  # before any candidate code
        init_inputs = programs.init_inputs
        details: dict[str, Any] = {}
        cand = self.req.get("candidate")
        if cand is not None:
            if self.cleared_builds:
                details["stale_build_locks_removed"] = list(self.cleared_builds)
            t0 = time.perf_counter()
            first_build = self.install_builds()
            try:
                mod = runtime.load_module(
                    runtime.CANDIDATE_MODULE, cand["source"], self.workdir, cand.get("filename", "candidate.py")
                )
            except (Exception, SystemExit) as e:
                kind = "compile_error" if _is_build_error(e) else runtime.classify_exception(e)
                raise self._failure(e, kind, f"importing the candidate failed: {runtime.one_line(e)}") from e
            details["import_s"] = time.perf_counter() - t0
            if not isinstance(getattr(mod, "ModelNew", None), type):
                raise StageFailure("malformed", "the candidate module has no class ModelNew")
            try:
                with self.hold("shared"):  # __init__ may put work on the device
                    new = runtime.instantiate(mod.ModelNew, init_inputs, int(self.req["init_seed"]), self.device)
            except Exception as e:
                raise self._failure(e, runtime.classify_exception(e),
                                    f"ModelNew(*get_init_inputs()) failed: {runtime.one_line(e)}") from e
            if not isinstance(new, torch.nn.Module):
                raise StageFailure("malformed", "ModelNew is not a torch.nn.Module")
            programs.candidate_module, programs.candidate = mod, new
            if len(inline_builds.EVENTS) > first_build:  # at import and in __init__
                details["builds"] = [e.to_json() for e in inline_builds.EVENTS[first_build:]]
            if self.device.startswith("cuda"):
                with self.hold("shared"):
                    details["memory"] = self.memory_plan = memory.plan(self)
        return details


    def install_builds(self) -> int:
        """Put the `load_inline` wrapper in place (`build/inline_builds.py`: the build cache, builds
        outside the device lock); returns how many builds this process has seen so far."""
        inline_builds.install(self.device, inline_builds.Hooks(self.released, lambda: self.phase("wait")))
        return len(inline_builds.EVENTS)

    def anchor_wanted(self, trial: int, inputs: list[Any]) -> bool:
        """Whether trial `trial` (0-based) runs the float64 anchor: always where it decides (the
        calibrated rule); in the fixed rule, where it decides nothing, only on the first trial
        and only while its float64 copies stay small (ANCHOR_REPORT_BYTES): at KernelBench's
        sizes (6.4 GB inputs) it doubled the trials' time and memory for a number nobody
        reads. A failing trial is anchored anyway (`correctness.py`)."""
        if self.rule.get("mode") == "calibrated":
            return True
        return trial == 0 and 2 * runtime.inputs_nbytes(inputs) * 8 // max(1, _elem(inputs)) <= ANCHOR_REPORT_BYTES

    def calibrate_atol(self, trials: list[dict[str, Any]]) -> None:
        """Where the anchor decided a trial, set the atol of later comparisons against eager
        from the trials' anchor errors."""
        decided = [a for t in trials if t.get("decided_by", "fixed") != "fixed" for a in t.get("anchor") or ()]
        if decided:
            self._calibrated_atol = max(a["limit"] + a["reference"] for a in decided)

    def mode_details(self, anchored: list[int] | None = None,
                      trials: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        mode = self.mode()
        out: dict[str, Any] = {"mode": mode, "rule": dict(self.rule)}
        if anchored is not None:
            out["anchored"] = {"trials": list(anchored), "rule": (
                "every trial (the calibrated rule decides by it)" if mode == "calibrated" else
                "the first trial while its float64 copies stay under "
                f"{ANCHOR_REPORT_BYTES / 2**30:g} GiB, and a trial that fails the fixed check (" + (
                    "where the reference rule's second look decides by it)" if mode == "reference"
                    else "to say how far each output is from float64)"))}
        if self.anchor is not None and self.anchor.unavailable:
            out["anchor_unavailable"] = self.anchor.unavailable
            if self.rule.get("mode") in ("calibrated", "reference"):
                out["note"] = "no float64 anchor, so the fixed tolerances judged: " + self.anchor.unavailable
        if self._calibrated_atol is not None:
            out["calibrated_atol"] = self._calibrated_atol
        if self.precision is not None:
            out["reference_precision"] = self.precision.to_json()
        if self.design_precision is not None:
            out["design_precision"] = self.design_precision.to_json()
        if mode == "reference":
            out["precision_evidence"] = self.evidence().to_json()
        if trials:
            out["decided_by"] = _decided(trials, mode, self.precision, self.evidence())
            out["benchmarks"] = {
                name: {"ok": all(t.get("benchmarks", {}).get(name, False) for t in trials), "trials": len(trials),
                       "rule": "elementwise against eager, " + ", ".join(
                           f"{d} atol=rtol={v['atol']:g}" for d, v in tol.items() if d != "float64")}
                for name, tol in compare.BENCHMARK_RULES.items()}
        return out

    # -- helpers --------------------------------------------------------------------------

    def fresh_inputs(self, p: Programs, attempt: int = 0) -> Callable[[int], list[Any]]:
        """Inputs for timed call i, made outside the timed region: freshly generated from the
        problem's `get_inputs()` with a seed of their own (new values at new addresses), on
        every device. No two timed calls share inputs or any relation between them (a scale,
        an offset, a permutation), so no cache keyed on values, samples, statistics or
        transforms of earlier inputs can hit, in this attempt or a re-timing (`attempt`).
        Generating costs about what reading the inputs once costs, so it at most doubles the
        timing stage's wall time; it is never timed."""
        seed = int(self.req["timing_seed"])

        def make(i: int) -> list[Any]:
            return self.make_inputs(p, record.timed_seed(seed, attempt, i))

        return make

    def timing_inputs(self, p: Programs) -> list[list[Any]]:
        seed = int(self.req["timing_seed"])
        first = self.make_inputs(p, record.warm_seed(seed, 0))
        want = int(self.req["timing"]["input_sets"])
        nbytes = runtime.inputs_nbytes(first)
        if self.device.startswith("cuda"):  # the rule the memory plan counts
            want = memory.timing_sets(want, nbytes, runtime.free_bytes(self.device, self.req.get("gpu_memory_fraction")))
        return [first] + [self.make_inputs(p, record.warm_seed(seed, i)) for i in range(1, want)]

    def call_candidate(self, model: torch.nn.Module, inputs: list[Any], look: bool = True) -> Any:
        """One guarded call: its failure the candidate's; what it left on the harness's inputs
        or in process-wide hooks rejects it (`harness_tampering`), looked at after every call
        but those measured under a profile hook (the provenance stage's own: the look would be
        measured with the call; a profile hook the candidate set is the stage-end snapshot's)
        and those the harness watches with a mode of its own (`look=False`: the precision watch,
        `correctness.watch_design`; the next call's look sees what the candidate left)."""
        sealed = guard.Inputs.of(inputs) if look and sys.getprofile() is None else None
        try:
            out = model(*inputs)
            runtime.synchronize(self.device)
        except (Exception, SystemExit) as e:
            self.note_cuda(e)
            raise self._failure(e, runtime.classify_exception(e), f"ModelNew.forward raised: {runtime.one_line(e)}") from e
        tampered = [t for t in (sealed.tampered(), *self.snapshot.hook_changes()) if t] if sealed else []
        if tampered:
            raise StageFailure("rejected", "harness_tampering: " + "; ".join(tampered[:4]))
        return out

    def _failure(self, e: BaseException, kind: str, reason: str) -> StageFailure:
        """The stage failure for candidate code that raised: `needs_gpu` when, on the CPU, the
        error says the code needs a GPU or its toolchain (it is not wrong, only not runnable
        here), else `kind`."""
        details = {"traceback": runtime.format_exception(e)}
        if runtime.needs_gpu(e, self.device):
            return StageFailure("needs_gpu", f"needs a GPU (evaluated on the CPU): {reason}; evaluate it with "
                                "--device cuda", details)
        return StageFailure(kind, reason, details)



STAGES: Mapping[str, str] = MappingProxyType({
    "load": "stages:Worker.stage_load",
    "correctness": "correctness:run_correctness",
    "integrity": "integrity:run_integrity",
    "audit": "audit:run_audit",
    "breach_audit": "redteam.audit:run_breach_audit",
    "provenance": "provenance:run_provenance",
    "calibrate": "roofline:run_calibrate",
    "shapes": "integrity:run_shapes",
    "timing": "timed:run_timing",
    "baseline": "timed:run_baseline",
    "confirm": "confirm:run_confirm",
    "prebuild": "prebuild:run_prebuild",
    "profile": "profile:run_profile",
})
"""Stage name -> `module:function` in this package, the function that runs it on the Worker."""


def _module(name: str) -> Any:
    return importlib.import_module(f"{__name__.rpartition('.')[0]}.{name}")


def stage(name: str) -> Callable[[Worker], dict[str, Any]]:
    """The function of stage `name` (`STAGES`), its module imported on first use."""
    module, _, path = STAGES[name].partition(":")
    found: Any = _module(module)
    for attr in path.split("."):
        found = getattr(found, attr)
    return found


def _decided(trials: list[dict[str, Any]], mode: str, seen: precision.RanPrecision | None,
             evidence: precision.Evidence) -> str:
    """Which rule decided the trials, in words, with the precision the reference ran at and
    the evidence of the design's."""
    ran = f"the reference ran in {seen.summary()}" if seen is not None else "the reference's precision was not seen"
    second = sum(1 for t in trials if t.get("decided_by") == "reference")
    if mode == "calibrated":
        return f"calibrated: every trial against float64 ({ran})"
    if second:
        wide = sum(1 for t in trials if t.get("allowance"))
        within = (f"{wide} within the error the reference's precision predicts" if wide else
                  "all within the reference's own error")
        return (f"reference: {second} of {len(trials)} trials outside the fixed tolerance of eager, judged against "
                f"float64, {within} ({ran}; {evidence.words})")
    return f"fixed: every trial within the tolerance of eager ({ran})"


def _is_build_error(e: BaseException) -> bool:
    text = str(e)
    return "Error building extension" in text or "ninja" in text.lower() or "nvcc" in text


def prepare_device(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request as the stages read it, its device made current (`referee.device_request`),
    with its build switches applied (`inline_builds.apply_settings`).

    Raises:
        RuntimeError: the request asks for a GPU and torch sees none.
    """
    request = device_request(request)
    inline_builds.apply_settings(request)
    return request


def start_ahead(device: str) -> None:
    """A worker started before its design comes (`evaluation/worker.py --ahead`): with torch
    imported, make the CUDA context on a GPU (its memory is the context's alone: nothing is
    kept allocated)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.zeros(1, device=device)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_request(request: Mapping[str, Any], workdir: Path, emit: Emit, record_dir: Path | None = None) -> dict[str, Any]:
    """Run the requested stages; return the response body (results and environment)."""
    request = prepare_device(request)
    graph = stages.plan(request, STAGES)
    worker = Worker(request, workdir, emit, record_dir)
    stages.keep_off_reserved_cores(request)
    if request.get("candidate") is not None:
        # before any device lock is held: a worker waiting here holds nothing another needs
        with worker.phase("wait"):
            worker.cleared_builds = builds.claim()

    def retired() -> str | None:
        return None if worker.poisoned is None else f"worker retired after a CUDA error: {worker.poisoned}"

    results = stages.drive(graph, lambda name: _run_stage(worker, name), emit, retired)
    return {"results": results, "environment": environment.describe(worker.device)}


SELF_LOCKING = frozenset({"load", "timing", "baseline", "confirm", "profile", "breach_audit"})
"""Stages that take the device lock themselves (for parts of their work); every other stage
holds it shared throughout, and `calibrate` (which measures the device's peaks) exclusive."""


@contextlib.contextmanager
def _stage_context(worker: Worker, name: str) -> Iterator[None]:
    if name == "load":
        # imports and __init__ run (a hang there is cut at the run limit); the builds they
        # start are charged to the compile limit by the sandbox, which sees the compilers
        if worker.device.startswith("cuda"):
            yield  # imports and builds run on the CPU; instantiation holds the lock itself
        else:
            with worker.hold("shared"):  # on the CPU, a build competes with timing
                yield
    elif name == "calibrate":
        with worker.hold("exclusive"):
            yield
    elif name in SELF_LOCKING:
        yield
    else:  # under strict (a request that runs `provenance`), own-code calls are counted (provenance.watching)
        strict = any(s.get("name") == "provenance" for s in worker.req.get("stages") or ())
        with worker.hold("shared"), _module("provenance").watching(worker, name) if strict else contextlib.nullcontext():
            yield


def _run_stage(worker: Worker, name: str) -> ValidatorResult:
    t0 = time.perf_counter()
    first_window = len(worker.windows)
    try:
        with _stage_context(worker, name), memory.stage_peak(worker.device) as peak:
            details = stage(name)(worker)
        if peak and isinstance(details, dict):
            details = {**details, **peak}
        locks = [w.to_json() for w in worker.windows[first_window:]]
        if locks and isinstance(details, dict):
            # waiting for another's hold is not this stage's work: said apart from its duration
            details = {**details, "locks": locks,
                       "lock_wait_s": round(sum(w.waited_s for w in worker.windows[first_window:]), 4)}
        return ValidatorResult(name, "passed", details=details, duration_s=time.perf_counter() - t0)
    except StageFailure as f:
        return f.result(name, time.perf_counter() - t0, **memory.peak_now(worker.device))
    except (Exception, SystemExit) as e:  # candidate code can raise anything; it becomes data
        worker.note_cuda(e)
        kind = runtime.classify_exception(e)
        return ValidatorResult(name, "failed", reason=f"{name} raised: {runtime.one_line(e)}"
                               + (memory.out_of_memory_note(worker.device, worker.memory_plan, worker.req)
                                  if kind == "oom" else ""),
                               kind=kind,  # type: ignore[arg-type]
                               details={"traceback": runtime.format_exception(e), **memory.peak_now(worker.device)},
                               duration_s=time.perf_counter() - t0)
