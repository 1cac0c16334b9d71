"""Owns the PyTorch domain's worker stages: load, correctness, timing, baseline.

Worker-side only. `run_request` drives the requested stages through the same graph rules as
the parent (a failed stage skips its dependents) and reports each result as it finishes. An
exception in candidate code is a failed stage; a CUDA error also retires the worker: every
later stage is skipped, since the CUDA context can no longer be trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch import (
    audit,
    compare,
    guard,
    integrity,
    provenance,
    roofline,
    runtime,
    timing,
)
from stratagem.domains.pytorch.runtime import Programs, StageFailure

Emit = Callable[[str, dict[str, Any]], None]


class Worker:
    """State shared by the stages of one request."""

    def __init__(self, request: Mapping[str, Any], workdir: Path) -> None:
        self.req = _freeze(request)  # read-only: candidate code cannot loosen tolerances
        self.workdir = workdir
        self.device = str(request["device"])
        self.programs: Programs | None = None
        self.poisoned: str | None = None
        self.snapshot = guard.Snapshot()  # before any candidate code is imported
        self.last_inputs: list[Any] | None = None
        self.compiled_state_reset = False
        """Set by the shapes stage: the candidate's compiled code must compile again."""

    # -- stages ---------------------------------------------------------------------------

    def stage_load(self) -> dict[str, Any]:
        prob = self.req["problem"]
        try:
            ref_mod = runtime.load_module(
                runtime.REFERENCE_MODULE, prob["source"], self.workdir, "reference.py"
            )
            init_inputs = runtime.init_inputs(ref_mod, int(self.req["init_seed"]), self.device)
            ref = runtime.instantiate(ref_mod.Model, init_inputs, int(self.req["init_seed"]), self.device)
        except Exception as e:  # the problem, not the candidate, is broken
            raise StageFailure(
                "problem_error", f"the reference problem failed to load: {runtime.one_line(e)}",
                {"traceback": runtime.format_exception(e)},
            ) from e
        self.programs = Programs(reference_module=ref_mod, reference=ref, init_inputs=init_inputs)
        details: dict[str, Any] = {}
        cand = self.req.get("candidate")
        if cand is not None:
            t0 = time.perf_counter()
            try:
                mod = runtime.load_module(
                    runtime.CANDIDATE_MODULE, cand["source"], self.workdir, cand.get("filename", "candidate.py")
                )
            except (Exception, SystemExit) as e:
                kind = "compile_error" if _is_build_error(e) else runtime.classify_exception(e)
                raise StageFailure(
                    kind, f"importing the candidate failed: {runtime.one_line(e)}",
                    {"traceback": runtime.format_exception(e)},
                ) from e
            details["import_s"] = time.perf_counter() - t0
            if not isinstance(getattr(mod, "ModelNew", None), type):
                raise StageFailure("malformed", "the candidate module has no class ModelNew")
            try:
                new = runtime.instantiate(mod.ModelNew, init_inputs, int(self.req["init_seed"]), self.device)
            except Exception as e:
                raise StageFailure(
                    runtime.classify_exception(e), f"ModelNew(*get_init_inputs()) failed: {runtime.one_line(e)}",
                    {"traceback": runtime.format_exception(e)},
                ) from e
            if not isinstance(new, torch.nn.Module):
                raise StageFailure("malformed", "ModelNew is not a torch.nn.Module")
            self.programs.candidate_module, self.programs.candidate = mod, new
        return details

    def stage_correctness(self) -> dict[str, Any]:
        p = self._programs(need_candidate=True)
        assert p.candidate is not None
        trials: list[dict[str, Any]] = []
        tolerances = self.req["tolerances"]
        for seed in self.req["seeds"]:
            inputs = self._inputs(p, int(seed))
            pristine = runtime.clone_inputs(inputs)
            ref_in, cand_in = runtime.clone_inputs(inputs), runtime.clone_inputs(inputs)
            del inputs
            with torch.no_grad():
                ref_out = self._call_reference(p.reference, ref_in)
                cand_out = self._call_candidate(p.candidate, cand_in)
            changed = compare.inputs_unchanged(pristine, cand_in)
            if changed is not None:
                raise StageFailure("wrong_output", f"trial seed {seed}: the candidate changed its inputs: {changed}",
                                   {"trials": trials})
            cmp = compare.compare_outputs(ref_out, cand_out, tolerances)
            trials.append({"seed": int(seed), **cmp.to_json()})
            self.last_inputs = cand_in  # the integrity stage refills these very tensors
            del ref_out, cand_out, ref_in, pristine
            _free(self.device)
            if not cmp.ok:
                raise StageFailure(cmp.kind, f"trial seed {seed}: {cmp.reason}", {"trials": trials})
        return {
            "trials": trials,
            "max_abs_err": max(t["max_abs_err"] for t in trials),
            "max_rel_err": max(t["max_rel_err"] for t in trials),
        }

    def stage_timing(self) -> dict[str, Any]:
        p = self._programs(need_candidate=True)
        assert p.candidate is not None
        model = p.candidate
        if self.compiled_state_reset:  # compile again outside the lock other workers time under
            try:
                with torch.no_grad():
                    self._call_candidate(model, self._inputs(p, int(self.req["timing_seed"])))
            except StageFailure as e:
                raise StageFailure(e.kind, f"the candidate failed before timing: {e.reason}", e.details) from e
            _free(self.device)
            self.compiled_state_reset = False
        with self._timing_lock(), torch.no_grad():
            sets = self._timing_inputs(p)
            try:
                stats = timing.time_callable(model, sets, self.req["timing"], self.device, self._fresh(p, sets))
            except Exception as e:
                self._note_cuda(e)
                raise StageFailure(runtime.classify_exception(e), f"the candidate failed while timed: {runtime.one_line(e)}",
                                   {"traceback": runtime.format_exception(e)}) from e
        try:
            work = roofline.work(p.reference, runtime.clone_inputs(sets[0]))
        except Exception as e:  # noqa: BLE001 - an uncountable reference only loses the floor
            work = {"error": runtime.one_line(e)}
        changed = self.snapshot.changes()
        if changed:
            raise StageFailure("rejected", "harness_tampering during timing: " + "; ".join(changed[:6]),
                               {"runtime": stats})
        if self.device.startswith("cuda"):
            gap, med = float(stats["unsynced_work_ms"]), float(stats["median_ms"])
            limit = max(SIDE_STREAM_FLOOR_MS, SIDE_STREAM_FRACTION * med)
            if gap > limit:  # confirm with an independent measurement before rejecting
                gap = min(gap, timing.unsynced_work_ms(model, sets, self.device))
                stats["unsynced_work_confirm_ms"] = gap
            if gap > limit:
                raise StageFailure(
                    "rejected",
                    f"side_stream: {gap:.4f} ms of work per call finished only after a device-wide "
                    f"synchronize (timed call {med:.4f} ms): work escaped the timed stream",
                    {"runtime": stats},
                )
        return {"runtime": stats, "work": work}

    def stage_baseline(self) -> dict[str, Any]:
        p = self._programs(need_candidate=False)
        modes = list(self.req.get("baselines") or ["eager"])
        out: dict[str, Any] = {}
        with self._timing_lock(), torch.no_grad():
            sets = self._timing_inputs(p)
            for mode in modes:
                try:
                    fn = _compiled(p.reference, mode)
                    out[mode] = timing.time_callable(fn, sets, self.req["timing"], self.device, self._fresh(p, sets))
                except Exception as e:
                    self._note_cuda(e)
                    if mode == "eager":
                        raise StageFailure("problem_error", f"timing the reference failed: {runtime.one_line(e)}",
                                           {"traceback": runtime.format_exception(e)}) from e
                    out[mode] = {"error": runtime.one_line(e)}
                finally:
                    runtime.reset_compiled()
        return {"baselines": out}

    # -- helpers --------------------------------------------------------------------------

    def _programs(self, need_candidate: bool) -> Programs:
        if self.programs is None or (need_candidate and self.programs.candidate is None):
            raise StageFailure("harness_error", "stage ran without a loaded program")
        return self.programs

    def _inputs(self, p: Programs, seed: int) -> list[Any]:
        try:
            return runtime.make_inputs(p.reference_module, seed, self.device)
        except Exception as e:
            raise StageFailure("problem_error", f"get_inputs() failed: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def _fresh(self, p: Programs, sets: list[list[Any]]) -> Callable[[int], list[Any]]:
        """Inputs for timed call i, made outside the timed region, never with values an
        earlier call saw (so value-keyed caches cannot hit). On a GPU: freshly generated
        from the problem's `get_inputs()` (new values at new addresses; cheap there). On the
        CPU, where generating gigabytes per call would dominate the run, the rotated sets are
        rescaled in place by a factor that differs for every call (1 + (i+1) * 2**-20,
        relative to the last factor that set saw), which changes every nonzero value."""
        if self.device.startswith("cuda"):
            base = int(self.req["timing_seed"]) + 1_000_003

            def make(i: int) -> list[Any]:
                return self._inputs(p, base + i)

            return make
        k = len(sets)
        last = [1.0] * k

        def rescale(i: int) -> list[Any]:
            j = i % k
            factor = 1.0 + (i + 1) * 2.0**-20
            for x in sets[j]:
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    x.mul_(factor / last[j])
            last[j] = factor
            return sets[j]

        return rescale

    def _timing_inputs(self, p: Programs) -> list[list[Any]]:
        seed = int(self.req["timing_seed"])
        first = self._inputs(p, seed)
        want = int(self.req["timing"]["input_sets"])
        nbytes = runtime.inputs_nbytes(first)
        if self.device.startswith("cuda") and nbytes > 0:
            free, _ = torch.cuda.mem_get_info()
            want = max(1, min(want, int(0.25 * free // nbytes)))
        return [first] + [self._inputs(p, seed + i) for i in range(1, want)]

    def _call_reference(self, model: torch.nn.Module, inputs: list[Any]) -> Any:
        try:
            out = model(*inputs)
            runtime.synchronize(self.device)
            return out
        except Exception as e:
            self._note_cuda(e)
            raise StageFailure("problem_error", f"the reference Model raised: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def _call_candidate(self, model: torch.nn.Module, inputs: list[Any]) -> Any:
        try:
            out = model(*inputs)
            runtime.synchronize(self.device)
            return out
        except (Exception, SystemExit) as e:
            self._note_cuda(e)
            raise StageFailure(runtime.classify_exception(e), f"ModelNew.forward raised: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def _note_cuda(self, e: BaseException) -> None:
        if runtime.classify_exception(e) == "cuda_error":
            self.poisoned = runtime.one_line(e)

    @contextlib.contextmanager
    def _timing_lock(self) -> Iterator[None]:
        path = self.req.get("timing_lock")
        if not path:
            yield
            return
        with open(path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


SIDE_STREAM_FLOOR_MS = 0.02
SIDE_STREAM_FRACTION = 0.10
"""Work finishing after the timed stream's end event beyond max(floor, fraction x runtime)
fails timing. Honest single-stream kernels measured 0.2-1.6 us on an H200."""

STAGES: dict[str, Callable[[Worker], dict[str, Any]]] = {
    "load": Worker.stage_load,
    "correctness": Worker.stage_correctness,
    "integrity": integrity.run_integrity,
    "audit": audit.run_audit,
    "provenance": provenance.run_provenance,
    "calibrate": lambda w: roofline.calibrate(w.device),
    "shapes": integrity.run_shapes,
    "timing": Worker.stage_timing,
    "baseline": Worker.stage_baseline,
}


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _is_build_error(e: BaseException) -> bool:
    text = str(e)
    return "Error building extension" in text or "ninja" in text.lower() or "nvcc" in text


def _compiled(model: torch.nn.Module, mode: str) -> Callable[..., Any]:
    if mode == "eager":
        return model
    runtime.reset_compiled()
    if mode == "compile":
        return torch.compile(model)
    return torch.compile(model, mode=mode)


def _free(device: str) -> None:
    # Freed blocks stay in torch's caching allocator for the next trial: returning them to
    # the driver (empty_cache) and allocating again costs more than the trial itself.
    gc.collect()


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "hostname": platform.node(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(
            device_name=torch.cuda.get_device_name(0),
            cuda=torch.version.cuda,
            capability=f"{props.major}.{props.minor}",
            memory_gb=round(props.total_memory / 2**30, 1),
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        )
    else:
        env.update(device_name=_cpu_name(), threads=torch.get_num_threads())
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_request(request: Mapping[str, Any], workdir: Path, emit: Emit) -> dict[str, Any]:
    """Run the requested stages; return the response body (results and environment)."""
    device = str(request["device"])
    if device == "cuda":
        device = "cuda:0"  # the slot pins one GPU with CUDA_VISIBLE_DEVICES
        request = {**request, "device": device}
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("the request asks for a CUDA device but torch sees no GPU")
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    specs = [ValidatorSpec(s["name"], tuple(s.get("requires", ())), "worker") for s in request["stages"]]
    unknown = [s.name for s in specs if s.name not in STAGES]
    if unknown:
        raise ValueError(f"unknown worker stages: {unknown}")
    worker = Worker(request, workdir)
    run = GraphRun(ValidatorGraph.of(specs), batch_placement=None)
    while (step := run.next_step()) is not None:
        spec = step.specs[0]
        if worker.poisoned is not None:
            result = ValidatorResult(spec.name, "skipped", reason=f"worker retired after a CUDA error: {worker.poisoned}")
        else:
            emit("start", {"stage": spec.name})
            result = _run_stage(worker, spec.name)
        run.record([result])
        emit("end", {"stage": spec.name, "result": result.to_json()})
    return {"results": [r.to_json() for r in run.results], "environment": environment(device)}


def _run_stage(worker: Worker, name: str) -> ValidatorResult:
    t0 = time.perf_counter()
    try:
        details = STAGES[name](worker)
        return ValidatorResult(name, "passed", details=details, duration_s=time.perf_counter() - t0)
    except StageFailure as f:
        return ValidatorResult(name, "failed", reason=f.reason, kind=f.kind,  # type: ignore[arg-type]
                               details=f.details, duration_s=time.perf_counter() - t0)
    except (Exception, SystemExit) as e:  # candidate code can raise anything; it becomes data
        worker._note_cuda(e)
        return ValidatorResult(name, "failed", reason=f"{name} raised: {runtime.one_line(e)}",
                               kind=runtime.classify_exception(e),  # type: ignore[arg-type]
                               details={"traceback": runtime.format_exception(e)},
                               duration_s=time.perf_counter() - t0)
