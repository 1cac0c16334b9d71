"""Owns the command domain's worker stages (`python -m stratagem.evaluation.worker` imports this
module by the request's `worker_module`: `CommandDomain.worker.module`): `build` (the reference
and the design built in separate directories, fixed files verified by hash, the design's
binaries checked for forbidden dependencies; the harness's baselines built beside them, exempt
from `[forbid]`),
`correctness` (both run on the same hidden inputs, outputs compared; a problem that needs a GPU
stops here on the CPU) and `timing` (`timing.py`); `run_request`, through the stage driver
every worker shares (`worker_api/stages.py`). Standard library only."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.command import forbid
from stratagem.domains.command.audit import breach_audit
from stratagem.domains.command.context import BASELINE, Context
from stratagem.domains.command.runner import Ran, become_subreaper, execute, write_files
from stratagem.domains.command.timing import timing
from stratagem.errors import ProblemError
from stratagem.worker_api import stages
from stratagem.worker_api.stages import Emit, StageFailure

# -- stages -----------------------------------------------------------------------------


def build(ctx: Context) -> dict[str, Any]:
    spec = ctx.spec
    findings = forbid.source_findings({k: v for k, v in ctx.design_files.items()}, spec.forbid)
    findings += forbid.link_findings(spec.build.command, spec.forbid, "the build command")
    unknown = sorted(set(ctx.design_files) - set(spec.editable))
    if unknown:
        raise StageFailure("rejected", f"the design has files the problem does not let it change: {unknown}")
    if findings:
        raise StageFailure("rejected", findings[0], findings=findings)
    out: dict[str, Any] = {}
    order = ("reference", *(w for w in ctx.programs if w.startswith(BASELINE)), "design")
    for who in order:
        d = ctx.dirs[who]
        d.mkdir(parents=True)
        write_files(d, ctx.files_of(who))
        write_files(d, ctx.bundle.fixed_files())  # after the editable ones: the harness's versions win
        with ctx.use.phase("compile"):
            ran = execute(spec.build.command, d, spec.build.timeout_s)
        out[f"{who}_build_s"] = round(ran.wall_ms / 1e3, 3)
        if not ran.ok:
            raise _build_failure(ctx, who, ran)
        ctx.verify_fixed(who, "build")
        if who == "reference":
            ctx.snapshot_reference()
        elif who == "design":
            ctx.verify_reference()
    binaries = forbid.elf_files(ctx.dirs["design"])
    try:
        found = _findings(ctx, "design")
        toolchain = sorted(set(found) & set(_findings(ctx, "reference")))
    except FileNotFoundError as e:
        raise StageFailure("harness_error", str(e)) from None
    found = [f for f in found if f not in toolchain]
    if found:
        raise StageFailure("rejected", found[0], findings=found)
    out["binaries"] = [b.relative_to(ctx.dirs["design"]).as_posix() for b in binaries]
    if toolchain:
        out["toolchain_findings"] = toolchain
        out["toolchain_note"] = ("the reference's own binaries have these too, so they come from the build's "
                                 "toolchain (a static runtime that dlopens its driver, say), not from the design: "
                                 "not held against it (the source and link-line rules still are)")
    return out


def _build_failure(ctx: Context, who: str, ran: Ran) -> StageFailure:
    """A failed build: the design's is its own; the reference's or a baseline's is the problem's."""
    why = ran.why(f"the {ctx.label(who)}'s build", ctx.spec.build.timeout_s)
    if who != "design" and ctx.spec.requires_gpu and not ctx.device.startswith("cuda"):
        return StageFailure("needs_gpu", f"{why}; the problem declares [requires] gpu = true and this "
                            "machine may lack its toolchain: evaluate with --device cuda on a GPU machine",
                            stderr=ran.stderr[-3000:])
    if who != "design":
        return StageFailure("problem_error", why, stderr=ran.stderr[-3000:])
    return StageFailure("timeout" if ran.timed_out else "compile_error", why, stderr=ran.stderr[-3000:],
                        stdout=ran.stdout[-1000:])


SHOWN = "{binary}"


def _findings(ctx: Context, who: str) -> list[str]:
    """The forbidden dependencies of `who`'s binaries, each named as `BINARY_PATH: finding`
    (so a design's and the reference's same binary give the same text)."""
    d = ctx.dirs[who]
    out = []
    for b in forbid.elf_files(d):
        rel = b.relative_to(d).as_posix()
        out += [f"{rel}: {f.replace(SHOWN, '').strip()}" for f in forbid.binary_findings(b, ctx.spec.forbid, SHOWN)]
    return out


def correctness(ctx: Context) -> dict[str, Any]:
    ctx.needs_gpu()
    trials = []
    for i, draw in enumerate(ctx.payload.get("trials") or ()):
        values = ctx.inputs(draw)
        # the design first: the reference's output on these inputs does not exist while it runs
        des = ctx.capture("design", ctx.run_once("design", values))
        ref = ctx.capture("reference", ctx.run_once("reference", values))
        a = ctx.agree(ref, des, values)
        sizes = {k: v for k, v in values.items() if k != "seed"}
        trials.append({"trial": i, "sizes": sizes, "ok": a.ok, **a.details})
        if not a.ok:
            raise StageFailure("wrong_output", f"trial {i} (hidden seed, sizes {sizes or 'none'}): {a.reason}",
                               trials=trials)
    if not trials:
        raise StageFailure("harness_error", "the request holds no correctness trials")
    nan = float("nan")  # a check command says agree or not, no error
    return {"trials": trials, "mode": ctx.spec.compare.mode,
            "max_abs_err": max(float(t.get("max_abs_err", nan)) for t in trials),
            "max_rel_err": max(float(t.get("max_rel_err", nan)) for t in trials)}


STAGES: dict[str, Callable[[Context], dict[str, Any]]] = {"build": build, "correctness": correctness, "timing": timing,
                                                          "breach_audit": breach_audit}
SELF_LOCKING = frozenset({"timing", "breach_audit"})
"""Stages that hold the device lock themselves (exclusive while timing); the others hold it shared."""


def _run_stage(ctx: Context, name: str) -> ValidatorResult:
    t0 = time.monotonic()
    try:
        with ctx.use.hold("shared") if name not in SELF_LOCKING else contextlib.nullcontext():
            details = STAGES[name](ctx)
    except StageFailure as f:
        return f.result(name, time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - the harness's own fault, said as data
        return ValidatorResult(name, "failed", f"harness: {type(e).__name__}: {e}", "harness_error", {},
                               time.monotonic() - t0)
    return ValidatorResult(name, "passed", None, None, details, time.monotonic() - t0)


def describe(device: str) -> dict[str, Any]:
    """Where the worker ran: its device (`cpu`, or `cuda` pinned by the slot) and that device's
    name (on a GPU the GPU's, as `nvidia-smi` names the one the slot pinned; the CPU's model
    too), host, the machine."""
    cpu = stages.cpu_name()
    gpu = gpu_name() if device.startswith("cuda") else None
    return {"device": device, "device_name": gpu or cpu, "cpu_name": cpu, "host_name": platform.node(),
            "machine": platform.machine(), "python": platform.python_version()}


def gpu_name() -> str | None:
    """The name of the first GPU this process may use (CUDA_VISIBLE_DEVICES' first entry, else
    GPU 0), from `nvidia-smi`; None where it cannot say."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", first],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def run_request(request: Mapping[str, Any], workdir: Path, emit: Emit, record_dir: Path | None = None) -> dict[str, Any]:
    """Run the requested stages; return the response body (results and environment)."""
    become_subreaper()
    graph = stages.plan(request, STAGES, "command-domain worker stages")
    stages.keep_off_reserved_cores(request)
    try:
        ctx: Context | None = Context(request, workdir, emit)
        broken = ""
    except ProblemError as e:  # the parent checked the same text: a mismatch is the problem's to answer for
        ctx, broken = None, str(e)

    def run_stage(name: str) -> ValidatorResult:
        return _run_stage(ctx, name) if ctx is not None else ValidatorResult(name, "failed", broken, "problem_error")

    results = stages.drive(graph, run_stage, emit)
    return {"results": results, "environment": describe(str(request.get("device") or "cpu"))}
