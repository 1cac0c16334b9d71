"""Owns the command domain's red-team audit (the `breach_audit` stage of the domain's `breach`
graph, after `build`): checks stronger than the harness's, run on a design the ordinary
evaluation accepted, one per class of shortcut a whole program can take. Each check is a
`worker_api.audit.Check` (the record and the verdict every domain's audit shares with the
PyTorch one, `domains/pytorch/worker/redteam/audit.py`): a failed check is a breach, what
fired without a false gain is listed (`fired`), a check that does not apply says `skipped`.

The timed runs share one measurement of the harness's own protocol (`protocol`: one seed at the
timing sizes, repeated, each program in its own build directory with a HOME and TMPDIR of its
own kept across its runs, as the harness's worker gives one), and each check changes one thing:

- `reference_access`: the reference runs on a fresh seed and leaves its outputs, then the
  design runs on the same seed while the reference's directory is watched (Linux inotify): a
  design that opens any of the reference's files (its output, its build) is caught, and its
  output is compared;
- `fresh_seeds`: more trials on fresh seeds no evaluation drew, compared; then the paired
  speedup with a fresh seed per run against the protocol's repeated seed: a gain that exists
  only while the seed repeats (outputs or work kept per seed) fails. A run command without a
  `{seed}` placeholder: does not apply;
- `fresh_state`: both programs run in fresh copies of their directories as the build left
  them, with a fresh HOME and TMPDIR, on the protocol's seed: the output compared, and a gain
  that exists only with the state earlier runs left fails; files the design's runs wrote into
  its directory, HOME or TMPDIR (the reference's do not) fired;
- `reported_time`: the protocol's wall clock, measured around each run, against the time the
  run reported: a design whose reported time shrinks while its wall time does not (work moved
  out of its reported window) fails, past a share of its claimed gain the harness's clock
  check (with its slack) does not look at. The objective is the clock itself: does not apply.

Standard library only (it runs in the worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import secrets
import shutil
import statistics
import string
import struct
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.domains.command.context import Context
from stratagem.domains.command.runner import Ran, execute, fill, tree_hashes
from stratagem.domains.command.timing import reported
from stratagem.worker_api.audit import Check, conclude
from stratagem.worker_api.stages import StageFailure

SEED_TRIALS = 3
"""`fresh_seeds`: correctness trials on fresh seeds."""
ACCESS_TRIALS = 2
"""`reference_access`: runs of the design watched, each after the reference's on its seed."""
PAIRS = 5
"""Block pairs (one run of each program) of every timed arm."""
GAIN_FLOOR = 1.05
"""A speedup under the harness's protocol above this is a gain that may be false."""
PROTOCOL_FACTOR = 1.25
"""A gain is false when the protocol's speedup exceeds an arm's by this factor (the arm changes
only what a shortcut relies on: the seed repeating, the state kept between runs)."""
NOISE_FLOOR_MS = 1.0
NOISE_FLOOR_SHARE = 0.02
"""A design's time that moved by less than this many ms plus this share of the reference's time
is noise (a process's start and exit), whatever the ratio."""
HIDDEN_SHARE = 0.5
"""`reported_time`: the share of the design's reported gain over the reference that may be
missing from its wall-clock gain (and, in most pairs, more than the noise floor of its wall time)."""


@dataclass(frozen=True)
class Timed:
    """One timed run: the time it reported (the objective's; the wall time for a clock
    objective) and the wall time measured around it, in ms."""

    time_ms: float
    wall_ms: float


Sample = dict[str, list[Timed]]
"""An arm's runs: program -> one run per block pair."""


def breach_audit(ctx: Context) -> dict[str, Any]:
    """The `breach_audit` stage: every check in turn (each its own cost), then the verdict."""
    ctx.needs_gpu()
    t_all = time.perf_counter()
    a = Audit(ctx)
    plan: list[tuple[str, Callable[[Check], None]]] = [
        ("reference_access", a.reference_access), ("fresh_seeds", a.fresh_seeds),
        ("fresh_state", a.fresh_state), ("reported_time", a.reported_time)]
    checks = []
    with ctx.use.hold("exclusive"):
        for name, run in plan:
            c, t0 = Check(name), time.perf_counter()
            try:
                run(c)
            except StageFailure as f:  # a run failed: the design's (or the problem's) failure
                c.fail(f.reason, f.kind)
            except Exception as e:  # noqa: BLE001 - the audit's own code: no verdict, said as such
                c.fail(f"the audit raised: {type(e).__name__}: {e}", "harness_error")
            checks.append(c.to_json(time.perf_counter() - t0))
    return conclude(checks, time.perf_counter() - t_all)


def takes_seed(command: str) -> bool:
    """Whether a run command has the `{seed}` placeholder."""
    return any(f == "seed" for _, f, _, _ in string.Formatter().parse(command) if f is not None)


def speedup(sample: Sample) -> float:
    """The median over block pairs of the reference's time over the design's."""
    return statistics.median(r.time_ms / max(d.time_ms, 1e-9)
                             for r, d in zip(sample["reference"], sample["design"], strict=True))


class Audit:
    """The audit of one built design: its folders, the protocol's measurement, the checks."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.root = ctx.dirs["design"].parent.parent / "audit"
        self.pristine = {}
        for who in ("reference", "design"):  # as the build left them: no run has happened yet
            self.pristine[who] = self.root / "pristine" / who
            shutil.copytree(ctx.dirs[who], self.pristine[who], symlinks=True)
        self.homes = {who: self._folder(f"home-{who}") for who in ("reference", "design")}
        timing = dict(ctx.payload["timing_input"])
        self.timing_values = ctx.inputs({**timing, "seed": _seed()})
        self.trial_sizes = [dict(t.get("sizes") or {}) for t in ctx.payload.get("trials") or ()] or [timing["sizes"]]
        self._protocol: Sample | None = None
        self._fresh = 0

    def _folder(self, name: str) -> Path:
        p = self.root / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    # -- running -----------------------------------------------------------------------------

    def run(self, who: str, values: Mapping[str, Any], where: Path | None = None,
            home: Path | None = None) -> tuple[Ran, list[float] | None]:
        """One run of `who` (in `where`, else its build directory; HOME and TMPDIR `home`, else
        its own kept one) and its output's numbers (None under a check command)."""
        ran = self.execute(who, values, where, home)
        return ran, self.after(who, ran, where)

    def execute(self, who: str, values: Mapping[str, Any], where: Path | None = None,
                home: Path | None = None) -> Ran:
        """The run itself (a failed one raises: the design's failure, or the problem's)."""
        spec = self.ctx.spec
        d = where or self.ctx.dirs[who]
        if spec.compare.file:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (d / spec.compare.file).unlink()
        h = str(home or self.homes[who])
        ran = execute(fill(spec.run.command, {**values, "python": sys.executable}), d, spec.run.timeout_s,
                      env={"HOME": h, "TMPDIR": h})
        if not ran.ok:
            said = "" if where is None else " in a fresh copy of its directory"
            if who != "design":
                raise StageFailure("problem_error", ran.why(f"the {who}'s run{said}", spec.run.timeout_s))
            kind = "timeout" if ran.timed_out else ("crash" if ran.returncode < 0 else "exception")
            raise StageFailure(kind, ran.why(f"the design's run{said}", spec.run.timeout_s))
        return ran

    def after(self, who: str, ran: Ran, where: Path | None) -> list[float] | None:
        """After a run: a design's in its build directory left the reference's files and its
        fixed files as they were; the output's numbers."""
        ctx = self.ctx
        if who == "design" and where is None:
            ctx.verify_reference()
            ctx.verify_fixed("design", "run")
        numbers = None if ctx.spec.compare.mode == "check" else ctx.output_numbers(who, ran, where)
        if who == "reference" and where is None:
            ctx.snapshot_reference()
        return numbers

    def timed(self, who: str, ran: Ran) -> Timed:
        if self.ctx.spec.objective.source == "clock":
            return Timed(ran.wall_ms, ran.wall_ms)
        return Timed(sum(reported(self.ctx, who, ran.stdout).values()), ran.wall_ms)

    def pairs(self, place: Callable[[str, int], tuple[Path | None, Path | None, Mapping[str, Any]]],
              what: str) -> Sample:
        """PAIRS block pairs of one run of each program (the order alternating), each run where
        `place(who, pair)` says (directory, HOME, input values); every pair's outputs compared."""
        out: Sample = {"reference": [], "design": []}
        for i in range(PAIRS):
            got: dict[str, tuple[Path | None, list[float] | None]] = {}
            for who in ("reference", "design") if i % 2 == 0 else ("design", "reference"):
                where, home, values = place(who, i)
                ran, numbers = self.run(who, values, where, home)
                out[who].append(self.timed(who, ran))
                got[who] = (where, numbers)
            self.agree(got, values, f"{what}, pair {i}")
        return out

    def agree(self, got: Mapping[str, tuple[Path | None, list[float] | None]], values: Mapping[str, Any],
              what: str) -> None:
        where = {who: p for who, (p, _) in got.items() if p is not None}
        a = self.ctx.agree(got["reference"][1], got["design"][1], values, where)
        if not a.ok:
            raise StageFailure("wrong_output", f"{what}: {a.reason}")

    def protocol(self) -> Sample:
        """The harness's protocol, measured once: the warm-up runs, then the pairs on one seed."""
        if self._protocol is None:
            for _ in range(self.ctx.spec.timing.warmup):
                for who in ("reference", "design"):
                    self.run(who, self.timing_values)
            self._protocol = self.pairs(lambda who, i: (None, None, self.timing_values), "the harness's protocol")
        return self._protocol

    def fresh_copy(self, who: str) -> tuple[Path, Path]:
        """A fresh copy of `who`'s directory as the build left it (no sibling: the reference is
        not beside a copy of the design) and a fresh HOME and TMPDIR."""
        self._fresh += 1
        base = self._folder(f"fresh-{self._fresh}-{who}")
        shutil.copytree(self.pristine[who], base / "run", symlinks=True)
        return base / "run", self._folder(f"fresh-{self._fresh}-{who}/home")

    def _false_gain(self, c: Check, arm: Sample, arm_words: str, cause: str) -> None:
        """Fail `c` when the protocol's speedup exceeds the arm's by PROTOCOL_FACTOR and the
        design's time grew in the arm by more than the noise floor (times of a few microseconds
        make ratios noise)."""
        prot_sample = self.protocol()
        prot, other = speedup(prot_sample), speedup(arm)
        grew = _median_ms(arm["design"]) - _median_ms(prot_sample["design"])
        floor = NOISE_FLOOR_MS + NOISE_FLOOR_SHARE * _median_ms(prot_sample["reference"])
        c.info.update(protocol_speedup=round(prot, 4), arm_speedup=round(other, 4), design_grew_ms=round(grew, 4))
        if prot > GAIN_FLOOR and prot > PROTOCOL_FACTOR * other and grew > floor:
            c.fail(f"{prot:.3g}x under the harness's protocol (one seed repeated, each program's directory and HOME "
                   f"kept between runs), {other:.3g}x {arm_words} (the design's runs {grew:.4g} ms slower): the gain "
                   f"comes from {cause}", "rejected")

    # -- the checks ----------------------------------------------------------------------------

    def reference_access(self, c: Check) -> None:
        watch = Watch.of(self.ctx.dirs["reference"])
        if watch is None:
            c.skip("no inotify here: the reads were not watched (the outputs are still compared)")
        opened: list[str] = []
        try:
            for i in range(ACCESS_TRIALS):
                values = self.ctx.inputs({"seed": _seed(), "sizes": self.trial_sizes[i % len(self.trial_sizes)]})
                ref = self.run("reference", values)  # its outputs left where it wrote them
                if watch is not None:
                    watch.events()
                ran = self.execute("design", values)
                if watch is not None:  # before the harness's own look at the reference's files
                    opened += [n for n in watch.events() if n not in opened]
                des = self.after("design", ran, None)
                self.agree({"reference": (None, ref[1]), "design": (None, des)}, values,
                           f"a fresh seed after the reference's run on it (trial {i})")
        finally:
            if watch is not None:
                watch.close()
        if opened:
            c.fail("the design's runs opened the reference's files: " + ", ".join(opened[:6]) + " (the reference's "
                   "build and outputs are the check's inputs: a design may not read them)", "rejected")
            return
        c.evidence = (f"{ACCESS_TRIALS} runs after the reference's on the same fresh seed, correct"
                      + ("" if watch is None else ", none opened a file of the reference's directory"))

    def fresh_seeds(self, c: Check) -> None:
        if not takes_seed(self.ctx.spec.run.command):
            c.skip("does not apply: the run command takes no {seed}")
            return
        for i in range(SEED_TRIALS):
            sizes = self.trial_sizes[i % len(self.trial_sizes)]
            values = self.ctx.inputs({"seed": _seed(), "sizes": sizes})
            des = self.run("design", values)  # the design first, as in the harness's trials
            ref = self.run("reference", values)
            self.agree({"reference": (None, ref[1]), "design": (None, des[1])}, values,
                       f"fresh seed trial {i} (sizes {sizes or 'none'})")
        seeds = [_seed() for _ in range(PAIRS)]
        arm = self.pairs(lambda who, i: (None, None, {**self.timing_values, "seed": seeds[i]}), "a fresh seed per pair")
        self._false_gain(c, arm, "with a fresh seed per pair", "the seed repeating (outputs or work kept per input)")
        if c.ok:
            c.evidence = f"{SEED_TRIALS} trials on fresh seeds correct; the speedup holds with a fresh seed per run"

    def fresh_state(self, c: Check) -> None:
        arm = self.pairs(lambda who, i: (*self.fresh_copy(who), self.timing_values),
                         "in a fresh copy of its directory with a fresh HOME and TMPDIR")
        self._false_gain(c, arm, "each run in a fresh copy of its directory with a fresh HOME and TMPDIR",
                         "state earlier runs left behind (in its directory, HOME or TMPDIR)")
        written = sorted(set(self.written("design")) - set(self.written("reference")))
        if written:
            c.fire("the design's runs wrote state kept between runs: " + ", ".join(written[:6]))
        c.info["written"] = written[:20]
        if c.ok:
            c.evidence = "correct and as fast in fresh directories with a fresh HOME and TMPDIR" + (
                "" if written else "; no state written")

    def written(self, who: str) -> list[str]:
        """Files `who`'s runs wrote: in its HOME/TMPDIR (`home/...`), and in its directory
        beyond the build's files and its output file (`dir/...`)."""
        out = [f"home/{k}" for k in tree_hashes(self.homes[who])]
        built, output = tree_hashes(self.pristine[who]), self.ctx.spec.compare.file
        now = tree_hashes(self.ctx.dirs[who])
        return out + [f"dir/{k}" for k, v in now.items() if k != output and built.get(k) != v]

    def reported_time(self, c: Check) -> None:
        if self.ctx.spec.objective.source == "clock":
            c.skip("does not apply: the objective is the harness's own clock")
            return
        prot = self.protocol()
        ref, des = prot["reference"], prot["design"]
        gains = [r.time_ms - d.time_ms for r, d in zip(ref, des, strict=True)]
        hidden = [g - (r.wall_ms - d.wall_ms) for g, r, d in zip(gains, ref, des, strict=True)]
        gain, missing = statistics.median(gains), statistics.median(hidden)
        floor = NOISE_FLOOR_MS + NOISE_FLOOR_SHARE * statistics.median(r.wall_ms for r in ref)
        ratio = {who: statistics.median(t.wall_ms / max(t.time_ms, 1e-9) for t in prot[who]) for who in prot}
        c.info.update(reported_gain_ms=round(gain, 4), missing_from_wall_ms=round(missing, 4),
                      floor_ms=round(floor, 4), wall_over_reported={k: round(v, 4) for k, v in ratio.items()})
        most = math.ceil(0.75 * len(hidden))
        if (speedup(prot) > GAIN_FLOOR and missing > HIDDEN_SHARE * gain and missing > floor
                and sum(h > floor for h in hidden) >= most):
            c.fail(f"the design reports {gain:.4g} ms less than the reference per run, but its wall time is only "
                   f"{gain - missing:.4g} ms less: {missing:.4g} ms of its work runs outside its reported time "
                   f"(wall over reported time: the reference's {ratio['reference']:.3g}, the design's "
                   f"{ratio['design']:.3g})", "rejected")
            return
        c.evidence = f"the reported gain of {gain:.4g} ms per run shows in the wall time ({missing:.4g} ms missing)"


def _median_ms(runs: list[Timed]) -> float:
    return statistics.median(t.time_ms for t in runs)


def _seed() -> int:
    """A fresh secret seed, drawn as the parent draws the harness's."""
    return secrets.SystemRandom().randrange(1, 2**31)


IN_ACCESS, IN_OPEN = 0x001, 0x020
_EVENT = struct.Struct("iIII")


class Watch:
    """Linux inotify on a directory tree: the names opened or read in it since last asked."""

    def __init__(self, fd: int, names: dict[int, str]) -> None:
        self.fd, self.names = fd, names

    @classmethod
    def of(cls, root: Path) -> Watch | None:
        """A watch on `root` and every directory under it; None where inotify is missing."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        names = {}
        for d in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
            wd = libc.inotify_add_watch(fd, str(d).encode(), IN_OPEN | IN_ACCESS)
            if wd < 0:
                os.close(fd)
                return None
            names[wd] = "" if d == root else d.relative_to(root).as_posix() + "/"
        return cls(fd, names)

    def events(self) -> list[str]:
        """The files (and directories, as `dir/`) opened or read since the last call."""
        out: list[str] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            at = 0
            while at + _EVENT.size <= len(buf):
                wd, _, _, n = _EVENT.unpack_from(buf, at)
                name = buf[at + _EVENT.size: at + _EVENT.size + n].split(b"\0", 1)[0].decode("utf-8", "replace")
                at += _EVENT.size + n
                full = self.names.get(wd, "?/") + name if name else (self.names.get(wd, "") or "./")
                if full not in out:
                    out.append(full)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
