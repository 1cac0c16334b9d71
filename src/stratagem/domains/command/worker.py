"""Owns the command domain's worker stages (`python -m stratagem.evaluation.worker` finds this
module by the request's domain): `build` (the reference and the design built in separate
directories, fixed files verified by hash, the design's binaries checked for forbidden
dependencies), `correctness` (both run on the same hidden inputs, outputs compared) and
`timing` (reference and design alternating in blocks, the paired ratio and stability verdict of
`core/paired.py`, each reported time checked against the wall time measured around its run).
Standard library only."""

from __future__ import annotations

import contextlib
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.paired import bootstrap_median, pair_ratios, paired_ratio, paired_stability
from stratagem.core.verdict import FailureKind, ValidatorResult
from stratagem.domains.command import forbid, formula, outputs
from stratagem.domains.command.problem import Bundle, bundle_of
from stratagem.domains.command.runner import (
    Ran,
    become_subreaper,
    changed_files,
    execute,
    fill,
    tree_hashes,
    write_files,
)
from stratagem.domains.command.spec import RETIMES, Spec
from stratagem.errors import ProblemError
from stratagem.worker_api.device_lock import DeviceLock

Emit = Callable[[str, dict[str, Any]], None]
WHO = ("reference", "design")
CLOCK_TOLERANCE_MS = 0.5
"""A reported time may exceed the wall time measured around its run by this much (clock
granularity); more is a time line the harness did not see happen."""


class StageFailure(Exception):
    """A stage's end as a failed result (raised inside the worker, caught by the stage driver)."""

    def __init__(self, kind: FailureKind, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.kind: FailureKind = kind
        self.reason = reason
        self.details = details


class Context:
    """What the stages share: the request, the bundle, the build directories, the lock, the
    progress emitter (a narrow view of the worker, not the worker itself)."""

    def __init__(self, request: Mapping[str, Any], workdir: Path, emit: Emit) -> None:
        self.request = request
        self.payload: Mapping[str, Any] = request.get("payload") or {}
        self.bundle: Bundle = bundle_of(request["problem"]["source"], request["problem"]["name"])
        self.design_files: dict[str, str] = dict(request.get("files") or {})
        self.dirs = {who: workdir / "build" / who for who in WHO}
        self.emit = emit
        lock = request.get("timing_lock")
        self.lock = DeviceLock(str(lock)) if lock else None
        self._phases = ["run"]
        self._reference_files: dict[str, str] = {}
        """The reference directory's files as its last run left them (a design's run may not touch them)."""

    @property
    def spec(self) -> Spec:
        return self.bundle.spec

    def files_of(self, who: str) -> dict[str, str]:
        """The editable files of `who`: the reference's, or the design's over them."""
        files = self.bundle.reference_files()
        if who == "design":
            files.update({k: v for k, v in self.design_files.items() if k in files})
        return files

    @contextlib.contextmanager
    def phase(self, name: str, **about: Any) -> Iterator[None]:
        self._phases.append(name)
        self.emit("phase", {"phase": name, **about})
        try:
            yield
        finally:
            self._phases.pop()
            self.emit("phase", {"phase": self._phases[-1]})

    @contextlib.contextmanager
    def hold(self, mode: str) -> Iterator[None]:
        """The device lock in `mode` (shared while building and checking, exclusive while timing)."""
        if self.lock is None:
            yield
            return

        @contextlib.contextmanager
        def waiting(holder: dict[str, Any] | None) -> Iterator[None]:
            with self.phase("wait", holder=holder):
                yield

        with self.lock.hold(mode, owner=dict(self.request.get("lock_owner") or {}), waiting=waiting):  # type: ignore[arg-type]
            with self.pinned() if mode == "exclusive" else contextlib.nullcontext():
                yield

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """While timing on a GPU slot, this worker and the commands it starts run on the cores
        reserved for that GPU's timing (Linux); elsewhere, or without them, nothing changes."""
        cores = {int(c) for c in self.request.get("timing_cores") or ()}
        if not cores or not hasattr(os, "sched_setaffinity"):
            yield
            return
        before = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, cores)
        except OSError:
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)

    def inputs(self, draw: Mapping[str, Any]) -> dict[str, Any]:
        """A hidden input draw as placeholder values: the seed and the sizes."""
        return {"seed": int(draw["seed"]), **{str(k): int(v) for k, v in dict(draw.get("sizes") or {}).items()}}

    def verify_fixed(self, who: str, when: str) -> None:
        changed = changed_files(self.dirs[who], self.bundle.fixed_files())
        if changed:
            kind: FailureKind = "problem_error" if who == "reference" else "rejected"
            raise StageFailure(kind, f"the {who}'s {when} changed the fixed file {changed[0]} (fixed files "
                               "belong to the harness: their hashes are checked after every build and run)",
                               changed=changed)

    def run_once(self, who: str, values: Mapping[str, Any]) -> Ran:
        """One run of `who` on the inputs `values` (a stale output file removed first). After a
        design's run, the reference's directory and the design's fixed files must be as they were."""
        d = self.dirs[who]
        if self.spec.compare.file:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (d / self.spec.compare.file).unlink()
        ran = execute(fill(self.spec.run.command, values), d, self.spec.run.timeout_s)
        if not ran.ok:
            limit = self.spec.run.timeout_s
            if who == "reference":
                raise StageFailure("problem_error", ran.why("the reference's run", limit), stderr=ran.stderr[-2000:])
            kind: FailureKind = "timeout" if ran.timed_out else ("crash" if ran.returncode < 0 else "exception")
            raise StageFailure(kind, ran.why("the design's run", limit), stderr=ran.stderr[-2000:],
                               stdout=ran.stdout[-1000:])
        if who == "reference":
            self.snapshot_reference()
        else:
            self.verify_reference()
            self.verify_fixed("design", "run")
        return ran

    def snapshot_reference(self) -> None:
        self._reference_files = tree_hashes(self.dirs["reference"])

    def verify_reference(self) -> None:
        now = tree_hashes(self.dirs["reference"])
        touched = sorted(k for k, v in self._reference_files.items() if now.get(k) != v)
        if touched:
            raise StageFailure("rejected", f"the design changed the reference's file {touched[0]} (a design "
                               "may not touch the reference's build)", changed=touched)

    def capture(self, who: str, ran: Ran) -> list[float] | None:
        """The output's numbers, read at once (None under a check command, which reads the run
        directories itself); the reference's output file is removed after, so no design run finds it."""
        if self.spec.compare.mode == "check":
            return None
        numbers = self.output_numbers(who, ran)
        if who == "reference" and self.spec.compare.file:
            with contextlib.suppress(OSError):
                (self.dirs[who] / self.spec.compare.file).unlink()
            self.snapshot_reference()
        return numbers

    def discard_output(self) -> None:
        """The reference's output file removed unread (a timed run's: its output is known)."""
        if self.spec.compare.mode != "check" and self.spec.compare.file:
            with contextlib.suppress(OSError):
                (self.dirs["reference"] / self.spec.compare.file).unlink()
            self.snapshot_reference()

    def output_numbers(self, who: str, ran: Ran) -> list[float]:
        cmp = self.spec.compare
        kind: FailureKind = "problem_error" if who == "reference" else "malformed"
        try:
            if cmp.mode == "json":
                v = outputs.json_value(ran.stdout, cmp.key or "")
                if v is None:
                    raise ValueError(f"no JSON line on stdout holds the key {cmp.key!r}")
                return outputs.flatten(v)
            path = self.dirs[who] / (cmp.file or "")
            if path.is_symlink():
                raise ValueError(f"the output file {cmp.file} is a link")
            return outputs.text_numbers(path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise StageFailure(kind, f"the {who}'s run wrote no output file {cmp.file}") from None
        except (OSError, ValueError) as e:
            raise StageFailure(kind, f"the {who}'s output cannot be read: {e}") from None

    def agree(self, ref: list[float] | None, des: list[float] | None, values: Mapping[str, Any]) -> outputs.Agreement:
        """Whether the design's output on `values` agrees with the reference's: the numbers
        captured from each, or the check command on the two run directories."""
        if ref is not None and des is not None:
            return outputs.agree(ref, des, self.spec.compare)
        check = self.spec.check
        if check is None:
            raise StageFailure("problem_error", "compare.mode is check and the problem has no [check] command")
        cmd = fill(check.command, {**values, "reference": self.dirs["reference"], "design": self.dirs["design"]})
        ran = execute(cmd, self.dirs["reference"], check.timeout_s)
        self.snapshot_reference()  # the check may write there
        if ran.timed_out:
            raise StageFailure("problem_error", ran.why("the check command", check.timeout_s))
        if not ran.ok:
            return outputs.Agreement(False, ran.why("the check command", check.timeout_s).replace(
                "exited with code", "rejected the output (exit code"), {"check_stdout": ran.stdout[-500:]})
        return outputs.Agreement(True, None, {})


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
    for who in WHO:
        d = ctx.dirs[who]
        d.mkdir(parents=True)
        write_files(d, ctx.files_of(who))
        write_files(d, ctx.bundle.fixed_files())  # after the editable ones: the harness's versions win
        with ctx.phase("compile"):
            ran = execute(spec.build.command, d, spec.build.timeout_s)
        out[f"{who}_build_s"] = round(ran.wall_ms / 1e3, 3)
        if not ran.ok:
            why = ran.why(f"the {who}'s build", spec.build.timeout_s)
            if who == "reference":
                raise StageFailure("problem_error", why, stderr=ran.stderr[-3000:])
            raise StageFailure("timeout" if ran.timed_out else "compile_error", why, stderr=ran.stderr[-3000:],
                               stdout=ran.stdout[-1000:])
        ctx.verify_fixed(who, "build")
        if who == "reference":
            ctx.snapshot_reference()
        else:
            ctx.verify_reference()
    binaries = forbid.elf_files(ctx.dirs["design"])
    try:
        found = [f for b in binaries for f in forbid.binary_findings(b, spec.forbid, b.relative_to(ctx.dirs["design"]).as_posix())]
    except FileNotFoundError as e:
        raise StageFailure("harness_error", str(e)) from None
    if found:
        raise StageFailure("rejected", found[0], findings=found)
    out["binaries"] = [b.relative_to(ctx.dirs["design"]).as_posix() for b in binaries]
    return out


def correctness(ctx: Context) -> dict[str, Any]:
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


def _stats(samples: list[float]) -> dict[str, Any]:
    if len(samples) >= 2:
        q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = med = q3 = samples[0]
    return {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "iqr_ms": q3 - q1, "n": len(samples),
            "min_ms": min(samples), "samples_ms": samples}


def _timed(ctx: Context, who: str, values: Mapping[str, Any], expected: list[float] | None,
           check: bool) -> tuple[float, float]:
    """(reported ms, wall ms) of one timed run, its reported time checked against its wall time;
    with `check`, a design's output against the reference's (`expected`)."""
    ran = ctx.run_once(who, values)
    got = ran.wall_ms
    objective = ctx.spec.objective
    if objective.source != "clock":
        reported = outputs.reported_ms(ran.stdout, objective)
        where = f"a JSON line's {objective.key!r}" if objective.source == "json" else f"the regex {objective.regex!r}"
        if reported is None:
            kind: FailureKind = "problem_error" if who == "reference" else "malformed"
            raise StageFailure(kind, f"the {who}'s timed run reported no time ({where} on stdout)")
        if reported > ran.wall_ms + CLOCK_TOLERANCE_MS:
            raise StageFailure("problem_error" if who == "reference" else "rejected",
                               f"the {who} reported {reported:.4g} ms, but the harness measured {ran.wall_ms:.4g} ms "
                               "around the whole run: the time line is not what happened")
        got = reported
    if who == "reference":
        ctx.discard_output()
    elif check and expected is not None:
        numbers = ctx.capture(who, ran)
        if numbers is not None:
            a = outputs.agree(expected, numbers, ctx.spec.compare)
            if not a.ok:
                raise StageFailure("wrong_output", f"a timed run's output differs from the reference's: {a.reason}")
    return got, ran.wall_ms


def _pairs(ctx: Context, values: Mapping[str, Any], expected: list[float] | None) -> dict[str, dict[str, list[Any]]]:
    """One paired timing: block pairs of reference and design alternating, under the exclusive lock."""
    spec = ctx.spec
    rng = random.SystemRandom()
    out: dict[str, dict[str, list[Any]]] = {k: {w: [] for w in WHO} for k in ("blocks", "walls", "outside")}
    with ctx.hold("exclusive"):
        for p in range(spec.timing.pairs):
            for who in (WHO if p % 2 == 0 else WHO[::-1]):
                block, outside = [], []
                checked = rng.randrange(spec.timing.runs)  # one timed output per block, unforeseeable
                for i in range(spec.timing.runs):
                    got, wall = _timed(ctx, who, values, expected, i == checked)
                    block.append(got)
                    outside.append(wall - got)
                    out["walls"][who].append(wall)
                out["blocks"][who].append(block)
                out["outside"][who].append(outside)
                if who == "design" and spec.compare.mode == "check":
                    a = ctx.agree(None, None, values)  # the block's last output, by the problem's check
                    if not a.ok:
                        raise StageFailure("wrong_output", f"a timed run's output fails the check: {a.reason}")
    return out


def _clock_check(ctx: Context, t: Mapping[str, Mapping[str, list[Any]]]) -> dict[str, float]:
    """The time the design's runs spent outside their reported time, against the reference's,
    paired: per block pair, the design block's least outside time less the reference block's
    (load only adds time, and what both saw cancels). Work a design hides from its reported
    time shows in every pair; a design is rejected when the median excess is above the
    allowance with 95% confidence (the bootstrap interval's low end), so the noise of a loaded
    machine does not reject an honest design."""
    if ctx.spec.objective.source == "clock":
        return {}
    o = ctx.spec.objective
    excess = [min(d) - min(r) for d, r in zip(t["outside"]["design"], t["outside"]["reference"], strict=True)]
    est = bootstrap_median(excess, seed=len(excess))
    allowed = o.clock_slack * statistics.median(t["walls"]["reference"]) + o.clock_slack_ms
    clock = {"design_excess_outside_ms": est.ratio, "excess_low_ms": est.low, "excess_high_ms": est.high,
             "allowed_excess_ms": allowed,
             "reference_outside_ms": statistics.median(x for b in t["outside"]["reference"] for x in b),
             "design_outside_ms": statistics.median(x for b in t["outside"]["design"] for x in b)}
    if est.low > allowed:
        raise StageFailure("rejected", f"the design's runs took {est.ratio:.4g} ms more than the reference's beyond "
                           f"the time they reported (paired median, 95% interval from {est.low:.4g} ms; allowed: "
                           f"{allowed:.4g} ms): its time line leaves out work the harness's clock saw", clock=clock)
    return clock


def floor_ms(ctx: Context, values: Mapping[str, Any]) -> dict[str, float] | None:
    """The speed-of-light floor of one run on `values` from the declared work and ceilings
    (None: none declared)."""
    w = ctx.spec.work
    if not w.declared:
        return None
    sizes = {k: float(v) for k, v in values.items() if k != "seed"}
    out: dict[str, float] = {}
    try:
        if w.flops is not None and w.peak_gflops is not None:
            out["flops"] = formula.evaluate(w.flops, sizes)
            out["compute_ms"] = out["flops"] / (w.peak_gflops * 1e6)
        if w.bytes is not None and w.peak_gbps is not None:
            out["bytes"] = formula.evaluate(w.bytes, sizes)
            out["memory_ms"] = out["bytes"] / (w.peak_gbps * 1e6)
    except ValueError as e:
        raise StageFailure("problem_error", f"the declared work cannot be computed: {e}") from None
    out["floor_ms"] = max(out.get("compute_ms", 0.0), out.get("memory_ms", 0.0))
    return out


def _check_floor(floor: Mapping[str, float] | None, ref_ms: float, des_ms: float) -> None:
    if floor is None:
        return
    f = floor["floor_ms"]
    if ref_ms < f:
        raise StageFailure("problem_error", f"the reference ran in {ref_ms:.4g} ms, under the floor of {f:.4g} ms its "
                           "declared work and ceilings give: [work] is wrong", floor=dict(floor))
    if des_ms < f:
        raise StageFailure("rejected", f"the design reported {des_ms:.4g} ms, under the speed-of-light floor of "
                           f"{f:.4g} ms (the declared work at the declared peak rates): impossible", floor=dict(floor))


def timing(ctx: Context) -> dict[str, Any]:
    spec = ctx.spec
    values = ctx.inputs(ctx.payload["timing_input"])
    # the outputs every timed run of the design must match
    expected = ctx.capture("reference", ctx.run_once("reference", values))
    for _ in range(spec.timing.warmup):
        for who in WHO:
            ctx.capture(who, ctx.run_once(who, values))
    expect = ctx.payload.get("reference_expect_ms")
    attempts = []
    for attempt in range(1 + RETIMES):
        t = _pairs(ctx, values, expected)
        ctx.verify_fixed("design", "timed runs")
        clock = _clock_check(ctx, t)
        blocks = t["blocks"]
        ref_flat = [x for b in blocks["reference"] for x in b]
        des_flat = [x for b in blocks["design"] for x in b]
        try:
            ratio = paired_ratio(blocks["reference"], blocks["design"], seed=attempt)
        except ValueError as e:
            raise StageFailure("malformed", f"no usable timing: {e}") from None
        stability = paired_stability(ratio, pair_ratios(blocks["reference"], blocks["design"]), ref_flat, des_flat,
                                     reference_expect_ms=float(expect) if expect else None)
        floor = floor_ms(ctx, values)
        _check_floor(floor, statistics.median(ref_flat), statistics.median(des_flat))
        attempts.append({"speedup": ratio.to_json(), "stability": stability.to_json()})
        if stability.stable:
            break
    sizes = {k: v for k, v in values.items() if k != "seed"}
    return {"runtime": _stats(des_flat), "reference": _stats(ref_flat), "speedup": ratio.to_json(),
            "stability": stability.to_json(), "attempts": attempts, "pairs": spec.timing.pairs,
            "runs_per_block": spec.timing.runs, "objective_source": spec.objective.source, "sizes": sizes,
            "clock": clock, "floor": floor, "wall": {"reference": _stats(t["walls"]["reference"]), "design": _stats(t["walls"]["design"])}}


STAGES: dict[str, Callable[[Context], dict[str, Any]]] = {"build": build, "correctness": correctness, "timing": timing}


def _run_stage(ctx: Context, name: str) -> ValidatorResult:
    t0 = time.monotonic()
    try:
        with ctx.hold("shared") if name != "timing" else contextlib.nullcontext():
            details = STAGES[name](ctx)
    except StageFailure as f:
        return ValidatorResult(name, "failed", f.reason, f.kind, f.details, time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - the harness's own fault, said as data
        return ValidatorResult(name, "failed", f"harness: {type(e).__name__}: {e}", "harness_error", {},
                               time.monotonic() - t0)
    return ValidatorResult(name, "passed", None, None, details, time.monotonic() - t0)


def describe(device: str) -> dict[str, Any]:
    """Where the worker ran: its device (`cpu`, or `cuda` pinned by the slot), host, the CPU's
    model name, the machine."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return {"device": device, "device_name": name, "host_name": platform.node(), "machine": platform.machine(),
            "python": platform.python_version()}


def _keep_off_reserved_cores(request: Mapping[str, Any]) -> None:
    """On a GPU machine with cores reserved for timing, this worker (and every command it
    starts) runs off them except while it times (Linux only)."""
    reserved = {int(c) for c in request.get("reserved_cores") or ()}
    if not reserved or not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError):
        rest = os.sched_getaffinity(0) - reserved
        if rest:
            os.sched_setaffinity(0, rest)


def run_request(request: Mapping[str, Any], workdir: Path, emit: Emit, record_dir: Path | None = None) -> dict[str, Any]:
    """Run the requested stages; return the response body (results and environment)."""
    become_subreaper()
    specs = [ValidatorSpec(s["name"], tuple(s.get("requires", ())), "worker") for s in request["stages"]]
    unknown = [s.name for s in specs if s.name not in STAGES]
    if unknown:
        raise ValueError(f"unknown command-domain worker stages: {unknown}")
    run = GraphRun(ValidatorGraph.of(specs), batch_placement=None)
    _keep_off_reserved_cores(request)
    try:
        ctx: Context | None = Context(request, workdir, emit)
        broken = ""
    except ProblemError as e:  # the parent checked the same text: a mismatch is the problem's to answer for
        ctx, broken = None, str(e)
    while (step := run.next_step()) is not None:
        spec = step.specs[0]
        emit("start", {"stage": spec.name})
        result = (_run_stage(ctx, spec.name) if ctx is not None
                  else ValidatorResult(spec.name, "failed", broken, "problem_error"))
        run.record([result])
        emit("end", {"stage": spec.name, "result": result.to_json()})
    return {"results": [r.to_json() for r in run.results], "environment": describe(str(request.get("device") or "cpu"))}
