"""Owns the PyTorch domain's worker: the Worker (the correctness rule in force, the load stage,
guarded calls), the table of stages (`STAGES`) and the request driver.

Worker-side only. The stage modules (correctness, integrity, timed, breach_audit, ...) take the
Worker, most as a narrow `context.StageContext`. `run_request` drives the requested stages
through the graph rules of the parent (a failed stage skips its dependents) and reports each
result as it finishes. An exception in candidate code is a failed stage; a CUDA error also
retires the worker: every later stage is skipped, since the CUDA context can no longer be
trusted.

Device use (`device_use.py`): every stage holds the device lock shared, the timed sections
exclusive; `load_inline` builds (`inline_builds.py`, installed before the candidate is imported)
hold no lock on a GPU, and unchanged sources load from the shared build cache.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch.worker import (
    audit,
    builds,
    compare,
    confirm,
    correctness,
    environment,
    guard,
    inline_builds,
    integrity,
    memory,
    prebuild,
    precision,
    profile,
    provenance,
    record,
    roofline,
    runtime,
    timed,
)
from stratagem.domains.pytorch.worker.anchor import Anchor
from stratagem.domains.pytorch.worker.device_use import DeviceUse, watch_compile_modes
from stratagem.domains.pytorch.worker.redteam import audit as breach_audit
from stratagem.domains.pytorch.worker.runtime import Programs
from stratagem.worker_api import stages
from stratagem.worker_api.stages import Emit, StageFailure

ANCHOR_REPORT_BYTES = 1 << 30
"""The fixed rule anchors its first trial only while the float64 copies of its inputs stay
under this (the anchor decides nothing there; it is reported)."""


def _elem(inputs: list[Any]) -> int:
    """The element size of the inputs' tensors (bytes, the largest)."""
    return max((x.element_size() for x in inputs if isinstance(x, torch.Tensor)), default=4)


class Worker(DeviceUse):
    """State shared by the stages of one request (its device use: `DeviceUse`)."""

    def __init__(self, request: Mapping[str, Any], workdir: Path, emit: Emit | None = None,
                 record_dir: Path | None = None) -> None:
        guard.watch_starts(workdir)  # who starts each thread, first: before any of the harness's threads
        super().__init__(request, emit)
        self.req = _freeze(request)  # read-only: candidate code cannot loosen tolerances
        self.recorder = record.Recorder(record_dir if request.get("judge") else None, str(request["device"]),
                                        lambda: self.phase("wait"))
        """The candidate outputs the judge checks (record.py)."""
        self.workdir = workdir
        self.programs: Programs | None = None
        self.poisoned: str | None = None
        watch_compile_modes()  # the harness's own wrapper, in place before the snapshot sees torch.compile
        self.snapshot = guard.Snapshot()  # before any candidate code is imported
        self.last_inputs: list[Any] | None = None
        self.memory_plan: dict[str, Any] | None = None
        """The evaluation's memory plan (`memory.plan`, made at load on a GPU)."""
        self.compiled_state_reset = False
        """Set by the shapes stage: the candidate's compiled code must compile again."""
        self.anchor: Anchor | None = None
        self.rule: Mapping[str, Any] = dict(request.get("correctness") or {"mode": "reference"})
        self._calibrated_atol: float | None = None
        """Set by the correctness trials where the anchor decided one (the calibrated rule, or
        the reference rule after the fixed check failed): the atol that later comparisons
        against eager (integrity, shapes) use, (factor + 1) x eager's largest error against
        the anchor plus the floor and the tolerance's atol (if |c - a| <= f e + t and
        |r - a| <= e, then |c - r| <= (f + 1) e + t)."""
        self.precision: precision.ReferencePrecision | None = None
        """What the reference computed in, seen on the first correctness trial."""
        self.cleared_builds: list[str] = []
        """Dead builds' batons removed from the build root (`claim_builds`)."""

    # -- stages ---------------------------------------------------------------------------

    def stage_load(self) -> dict[str, Any]:
        prob = self.req["problem"]
        try:
            ref_mod = runtime.load_module(
                runtime.REFERENCE_MODULE, prob["source"], self.workdir, "reference.py"
            )
            with self.hold("shared"):
                init_inputs = runtime.init_inputs(ref_mod, int(self.req["init_seed"]), self.device)
                ref = runtime.instantiate(ref_mod.Model, init_inputs, int(self.req["init_seed"]), self.device)
        except Exception as e:  # the problem, not the candidate, is broken
            raise StageFailure(
                runtime.problem_kind(e), f"the reference problem failed to load: {runtime.one_line(e)}",
                {"traceback": runtime.format_exception(e)},
            ) from e
        self.programs = Programs(reference_module=ref_mod, reference=ref, init_inputs=init_inputs)
        self.snapshot.watch(runtime.REFERENCE_MODULE, ref_mod)  # before any candidate code
        self.anchor = Anchor(ref, self.device)
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
            self.programs.candidate_module, self.programs.candidate = mod, new
            if len(inline_builds.EVENTS) > first_build:  # at import and in __init__
                details["builds"] = [e.to_json() for e in inline_builds.EVENTS[first_build:]]
            if self.device.startswith("cuda"):
                with self.hold("shared"):
                    details["memory"] = self.memory_plan = memory.plan(self)
        return details


    def install_builds(self) -> int:
        """Put the `load_inline` wrapper in place (`inline_builds.py`: the build cache, builds
        outside the device lock); returns how many builds this process has seen so far."""
        inline_builds.install(self.device, inline_builds.Hooks(self.released, lambda: self.phase("wait")))
        return len(inline_builds.EVENTS)

    def stage_correctness(self) -> dict[str, Any]:
        """The correctness trials (`correctness.run_correctness`)."""
        return correctness.run_correctness(self)

    def anchor_wanted(self, trial: int, inputs: list[Any]) -> bool:
        """Whether trial `trial` (0-based) runs the float64 anchor: always where it decides (the
        calibrated rule); in the fixed rule, where it decides nothing, only on the first trial
        and only while its float64 copies stay small (ANCHOR_REPORT_BYTES): at KernelBench's
        sizes (6.4 GB inputs) it doubled the trials' time and memory for a number nobody
        reads. A failing trial is anchored anyway (stage_correctness)."""
        if self.rule.get("mode") == "calibrated":
            return True
        return trial == 0 and 2 * runtime.inputs_nbytes(inputs) * 8 // max(1, _elem(inputs)) <= ANCHOR_REPORT_BYTES

    def calibrate_atol(self, trials: list[dict[str, Any]]) -> None:
        """Where the anchor decided a trial, set the atol of later comparisons against eager
        from the trials' anchor errors."""
        decided = [a for t in trials if t.get("decided_by", "fixed") != "fixed" for a in t.get("anchor") or ()]
        if decided:
            self._calibrated_atol = max(a["limit"] + a["reference"] for a in decided)

    def mode(self) -> str:
        """The rule in force: `calibrated` only while an anchor can be computed (else `fixed`);
        `reference` (without an anchor its second look cannot be had: the fixed check decides)."""
        mode = str(self.rule.get("mode") or "reference")
        if mode == "calibrated" and self.anchor is not None and self.anchor.unavailable is not None:
            return "fixed"
        return mode

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
        if trials:
            out["decided_by"] = _decided(trials, mode, self.precision)
            out["benchmarks"] = {
                name: {"ok": all(t.get("benchmarks", {}).get(name, False) for t in trials), "trials": len(trials),
                       "rule": "elementwise against eager, " + ", ".join(
                           f"{d} atol=rtol={v['atol']:g}" for d, v in tol.items() if d != "float64")}
                for name, tol in compare.BENCHMARK_RULES.items()}
        return out

    def judge(self, ref_out: Any, cand_out: Any, inputs: list[Any], report_anchor: bool = True) -> compare.Comparison:
        """Compare by the rule in force, with both outputs' errors against the anchor (in the
        fixed mode only when `report_anchor`: there it decides nothing; in the reference mode
        when the fixed check fails, where its second look needs it)."""
        want = report_anchor or self.rule.get("mode") == "calibrated"
        anchor = self.anchor(inputs) if self.anchor is not None and want else None
        return self.compare_with_anchor(ref_out, cand_out, anchor,
                                        lambda: self.anchor(inputs) if self.anchor is not None else None)

    def compare_with_anchor(self, ref_out: Any, cand_out: Any, anchor: Any,
                            anchor_of: Callable[[], Any] | None = None) -> compare.Comparison:
        """Compare by the rule in force, given the float64 anchor's output (or None, and
        `anchor_of` to compute it where the reference rule needs it: a failed fixed check)."""
        mode = self.mode()
        if anchor is not None and mode == "calibrated":
            return compare.calibrated_compare(anchor, ref_out, cand_out, self.rule)
        tol = self.req["tolerances"]
        cmp = compare.compare_outputs(ref_out, cand_out, tol)
        if cmp.kind == "malformed" and not cmp.ok:
            return cmp
        if anchor is None and not cmp.ok and anchor_of is not None:
            anchor = anchor_of()  # decides under the reference rule; reported under the fixed one
        if anchor is None:
            return cmp
        if not cmp.ok and mode == "reference":
            return compare.reference_compare(anchor, ref_out, cand_out, self.rule, tol, cmp)
        with contextlib.suppress(RuntimeError, ValueError):  # outputs too unlike to measure
            cmp.anchor = compare.against_anchor(anchor, ref_out, cand_out, self.rule, compare.Comparison(True),
                                                tolerances=tol if mode == "reference" else None).anchor
        return cmp

    def tolerances(self) -> Mapping[str, Mapping[str, float]]:
        """Tolerances for comparisons against eager after correctness (integrity, shapes): the
        fixed ones, widened where the anchor decided a trial (`_calibrated_atol`)."""
        if self._calibrated_atol is not None:
            base = self.req["tolerances"] if self.mode() == "reference" else {}
            return {k: {"atol": self._calibrated_atol,
                        "rtol": float((base.get(k) or base.get("float32") or {}).get("rtol", 0.0))}
                    for k in ("float16", "bfloat16", "float32", "float64")}
        return self.req["tolerances"]

    # -- helpers --------------------------------------------------------------------------

    def loaded(self, need_candidate: bool) -> Programs:
        if self.programs is None or (need_candidate and self.programs.candidate is None):
            raise StageFailure("harness_error", "stage ran without a loaded program")
        return self.programs

    def make_inputs(self, p: Programs, seed: int) -> list[Any]:
        try:
            return runtime.make_inputs(p.reference_module, seed, self.device)
        except Exception as e:
            raise StageFailure(runtime.problem_kind(e), f"get_inputs() failed: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

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

    def call_reference(self, model: torch.nn.Module, inputs: list[Any]) -> Any:
        try:
            out = model(*inputs)
            runtime.synchronize(self.device)
            return out
        except Exception as e:
            self.note_cuda(e)
            raise StageFailure(runtime.problem_kind(e), f"the reference Model raised: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def call_candidate(self, model: torch.nn.Module, inputs: list[Any]) -> Any:
        """One guarded call: its failure the candidate's; what it left on the harness's inputs
        or in process-wide hooks rejects it (`harness_tampering`), looked at after every call
        but those measured under a profile hook (the provenance stage's own: the look would be
        measured with the call; a profile hook the candidate set is the stage-end snapshot's)."""
        sealed = guard.Inputs.of(inputs) if sys.getprofile() is None else None
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

    def note_cuda(self, e: BaseException) -> None:
        if runtime.classify_exception(e) == "cuda_error":
            self.poisoned = runtime.one_line(e)



STAGES: dict[str, Callable[[Worker], dict[str, Any]]] = {
    "load": Worker.stage_load,
    "correctness": Worker.stage_correctness,
    "integrity": integrity.run_integrity,
    "audit": audit.run_audit,
    "breach_audit": breach_audit.run_breach_audit,
    "provenance": provenance.run_provenance,
    "calibrate": lambda w: roofline.calibrate(w.device),
    "shapes": integrity.run_shapes,
    "timing": timed.run_timing,
    "baseline": timed.run_baseline,
    "confirm": confirm.run_confirm,
    "prebuild": prebuild.run_prebuild,
    "profile": profile.run_profile,
}


def _decided(trials: list[dict[str, Any]], mode: str, seen: precision.ReferencePrecision | None) -> str:
    """Which rule decided the trials, in words, with the precision the reference ran at."""
    ran = f"the reference ran in {seen.summary()}" if seen is not None else "the reference's precision was not seen"
    second = sum(1 for t in trials if t.get("decided_by") == "reference")
    if mode == "calibrated":
        return f"calibrated: every trial against float64 ({ran})"
    if second:
        return (f"reference: {second} of {len(trials)} trials outside the fixed tolerance of eager, judged against "
                f"float64 within the reference's own error ({ran})")
    return f"fixed: every trial within the tolerance of eager ({ran})"


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _is_build_error(e: BaseException) -> bool:
    text = str(e)
    return "Error building extension" in text or "ninja" in text.lower() or "nvcc" in text


def unpack(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope (`EvalRequest`) as the stages read it: its payload's fields at the top,
    and the design's `candidate.py` as `candidate` (None for a reference-only request)."""
    if "payload" not in envelope:  # already unpacked
        return dict(envelope)
    out = {k: v for k, v in envelope.items() if k not in ("payload", "files")}
    out.update(envelope["payload"] or {})
    files = envelope.get("files") or {}
    out["candidate"] = {"filename": "candidate.py", "source": files["candidate.py"]} if "candidate.py" in files else None
    return out


def prepare_device(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request unpacked (`unpack`), with its device made explicit (`cuda` -> `cuda:0`: the
    slot pins one GPU with CUDA_VISIBLE_DEVICES), that device made current.

    Raises:
        RuntimeError: the request asks for a GPU and torch sees none.
    """
    request = unpack(request)
    device = str(request["device"])
    if device == "cuda":
        device = "cuda:0"
        request = {**request, "device": device}
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("the request asks for a CUDA device but torch sees no GPU")
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        runtime.cap_memory(device, request.get("gpu_memory_fraction"))
    else:  # one thread count for every program timed on the CPU ([pytorch] cpu_threads)
        torch.set_num_threads(int(request.get("cpu_threads") or 1))
    inline_builds.apply_settings(request)
    return request


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
    else:  # under strict, own-code calls are counted in the untimed stages (provenance.watching)
        with worker.hold("shared"), provenance.watching(worker, name):
            yield


def _run_stage(worker: Worker, name: str) -> ValidatorResult:
    t0 = time.perf_counter()
    first_window = len(worker.windows)
    try:
        with _stage_context(worker, name), memory.stage_peak(worker.device) as peak:
            details = STAGES[name](worker)
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
