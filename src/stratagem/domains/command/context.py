"""Owns what the command domain's worker stages share: `Context` (the request, the problem's
bundle, the build directories of every program: the reference, the design and the harness's
baselines; the device's lock holds and phases, `worker_api/device_use.py`). Standard library
only."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stratagem.core.verdict import FailureKind
from stratagem.domains.command import outputs
from stratagem.domains.command.problem import Bundle, bundle_of
from stratagem.domains.command.runner import Ran, changed_files, execute, fill, tree_hashes
from stratagem.domains.command.spec import Spec
from stratagem.worker_api.device_use import DeviceUse
from stratagem.worker_api.stages import Emit, StageFailure

WHO = ("reference", "design")
BASELINE = "baseline:"
"""A harness baseline's program name prefix (`baseline:cublas`)."""
CLOCK_TOLERANCE_MS = 0.5
"""A reported time may exceed the wall time measured around its run by this much (clock
granularity); more is a time line the harness did not see happen."""


class Context:
    """What the stages share: the request, the bundle, the build directories, the device's
    lock holds and phases (`use`: a narrow view of the worker, not the worker itself)."""

    def __init__(self, request: Mapping[str, Any], workdir: Path, emit: Emit) -> None:
        self.request = request
        self.payload: Mapping[str, Any] = request.get("payload") or {}
        self.bundle: Bundle = bundle_of(request["problem"]["source"], request["problem"]["name"])
        self.design_files: dict[str, str] = dict(request.get("files") or {})
        self.programs: tuple[str, ...] = (*WHO, *(BASELINE + b.name for b in self.bundle.spec.baselines))
        """Every program an evaluation builds and times: the reference, the design, the baselines."""
        self.dirs = {who: workdir / "build" / who.replace(":", "_") for who in self.programs}
        self.use = DeviceUse(request, emit)
        """The device lock held shared while building and checking, exclusive while timing."""
        self.device = self.use.device
        self._reference_files: dict[str, str] = {}
        """The reference directory's files as its last run left them (a design's run may not touch them)."""

    @property
    def spec(self) -> Spec:
        return self.bundle.spec

    def label(self, who: str) -> str:
        """How a program is named in a reason: `reference`, `design`, `the cuBLAS baseline`."""
        if who.startswith(BASELINE):
            b = next(x for x in self.spec.baselines if BASELINE + x.name == who)
            return f"{b.label} baseline"
        return who

    def files_of(self, who: str) -> dict[str, str]:
        """The editable files of `who`: the reference's, a baseline's, or the design's over the reference's."""
        if who.startswith(BASELINE):
            return self.bundle.baseline_files(who.removeprefix(BASELINE))
        files = self.bundle.reference_files()
        if who == "design":
            files.update({k: v for k, v in self.design_files.items() if k in files})
        return files

    def inputs(self, draw: Mapping[str, Any]) -> dict[str, Any]:
        """A hidden input draw as placeholder values: the seed and the sizes."""
        return {"seed": int(draw["seed"]), **{str(k): int(v) for k, v in dict(draw.get("sizes") or {}).items()}}

    def needs_gpu(self) -> None:
        """A problem that declares `[requires] gpu` ends here on a CPU-only evaluation."""
        if self.spec.requires_gpu and not self.device.startswith("cuda"):
            raise StageFailure("needs_gpu", "the problem declares [requires] gpu = true and this evaluation runs on "
                               f"the CPU (device {self.device}): the programs were built, not run; evaluate "
                               "with --device cuda on a machine with a GPU")

    def verify_fixed(self, who: str, when: str) -> None:
        changed = changed_files(self.dirs[who], self.bundle.fixed_files())
        if changed:
            kind: FailureKind = "rejected" if who == "design" else "problem_error"
            raise StageFailure(kind, f"the {self.label(who)}'s {when} changed the fixed file {changed[0]} (fixed files "
                               "belong to the harness: their hashes are checked after every build and run)",
                               changed=changed)

    def run_once(self, who: str, values: Mapping[str, Any]) -> Ran:
        """One run of `who` on the inputs `values` (a stale output file removed first). After a
        design's run, the reference's directory and the design's fixed files must be as they were."""
        d = self.dirs[who]
        if self.spec.compare.file:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (d / self.spec.compare.file).unlink()
        ran = execute(fill(self.spec.run.command, {**values, "python": sys.executable}), d, self.spec.run.timeout_s)
        if not ran.ok:
            limit = self.spec.run.timeout_s
            if who != "design":
                raise StageFailure("problem_error", ran.why(f"the {self.label(who)}'s run", limit),
                                   stderr=ran.stderr[-2000:])
            kind: FailureKind = "timeout" if ran.timed_out else ("crash" if ran.returncode < 0 else "exception")
            raise StageFailure(kind, ran.why("the design's run", limit), stderr=ran.stderr[-2000:],
                               stdout=ran.stdout[-1000:])
        if who == "reference":
            self.snapshot_reference()
        elif who == "design":
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

    def output_numbers(self, who: str, ran: Ran, where: Path | None = None) -> list[float]:
        """The numbers of `who`'s output (the run ran in `where`, else its own directory)."""
        cmp = self.spec.compare
        kind: FailureKind = "problem_error" if who == "reference" else "malformed"
        try:
            if cmp.mode == "json":
                v = outputs.json_value(ran.stdout, cmp.key or "")
                if v is None:
                    raise ValueError(f"no JSON line on stdout holds the key {cmp.key!r}")
                return outputs.flatten(v)
            path = (where or self.dirs[who]) / (cmp.file or "")
            if path.is_symlink():
                raise ValueError(f"the output file {cmp.file} is a link")
            return outputs.text_numbers(path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise StageFailure(kind, f"the {who}'s run wrote no output file {cmp.file}") from None
        except (OSError, ValueError) as e:
            raise StageFailure(kind, f"the {who}'s output cannot be read: {e}") from None

    def agree(self, ref: list[float] | None, des: list[float] | None, values: Mapping[str, Any],
              where: Mapping[str, Path] | None = None) -> outputs.Agreement:
        """Whether the design's output on `values` agrees with the reference's: the numbers
        captured from each, or the check command on the two run directories (`where`'s
        `reference` and `design`, else their own)."""
        if ref is not None and des is not None:
            return outputs.agree(ref, des, self.spec.compare)
        check = self.spec.check
        if check is None:
            raise StageFailure("problem_error", "compare.mode is check and the problem has no [check] command")
        dirs = {**self.dirs, **(where or {})}
        cmd = fill(check.command, {**values, "python": sys.executable, "reference": dirs["reference"],
                                   "design": dirs["design"]})
        ran = execute(cmd, dirs["reference"], check.timeout_s)
        self.snapshot_reference()  # the check may write there
        if ran.timed_out:
            raise StageFailure("problem_error", ran.why("the check command", check.timeout_s))
        if not ran.ok:
            said = ([x.strip() for x in ran.stdout.splitlines() if x.strip()]
                    or [x.strip() for x in ran.stderr.splitlines() if x.strip()])
            how = (f"exit code {ran.returncode}" if ran.returncode >= 0
                   else ran.why("the check command", check.timeout_s))
            why = f"the check command rejected the output ({how})" + (f": {said[-1][:600]}" if said else "")
            return outputs.Agreement(False, why, {"check_stdout": ran.stdout[-500:], "check_stderr": ran.stderr[-500:]})
        return outputs.Agreement(True, None, {})
