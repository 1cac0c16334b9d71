"""Owns validator results and verdicts: what the harness concluded about one design.

A candidate's failure is data. Each validator ends `passed`, `failed` or `skipped`; a failed
one says what kind of failure it was and why, in one line an agent can act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["passed", "failed", "skipped"]
"""How one validator ended."""

FailureKind = Literal[
    "rejected",  # a static check or rule refused the candidate
    "malformed",  # the candidate or its output breaks the expected form
    "compile_error",  # building the candidate's kernels failed
    "exception",  # the candidate raised
    "wrong_output",  # outputs disagree with the reference beyond tolerance
    "timeout",  # the worker ran past its deadline and was killed
    "crash",  # the worker died (segfault, abort, killed by a signal)
    "oom",  # out of memory (host or device)
    "cuda_error",  # a CUDA error (illegal address, launch failure)
    "problem_error",  # the reference problem itself is broken: not the candidate's fault
    "harness_error",  # stratagem's own machinery failed
    "needs_gpu",  # GPU-only code (Triton, CUDA sources, .cuda()) evaluated on the CPU
]
"""Why a validator failed. `problem_error` and `harness_error` make the verdict `error`."""

VerdictStatus = Literal["valid", "invalid", "error", "needs_gpu"]
"""`valid`: every validator passed. `invalid`: the candidate failed. `error`: no fair verdict."""

ERROR_KINDS: frozenset[str] = frozenset({"problem_error", "harness_error"})


@dataclass(frozen=True)
class ValidatorResult:
    """What one validator concluded."""

    name: str
    """The validator's name in the graph."""
    outcome: Outcome
    """`passed`, `failed` or `skipped`."""
    reason: str | None = None
    """One line saying why it failed or was skipped; `None` when it passed."""
    kind: FailureKind | None = None
    """The failure's kind; `None` unless `outcome == 'failed'`."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """JSON-able facts: errors, trials, tracebacks (tails), measurements."""
    duration_s: float | None = None
    """Wall time the validator took, `None` if it did not run."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ValidatorResult:
        """The inverse of `to_json` (reading stored evaluations back)."""
        return cls(name=str(d["name"]), outcome=d["outcome"], reason=d.get("reason"),
                   kind=d.get("kind"), details=dict(d.get("details") or {}),
                   duration_s=d.get("duration_s"))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "reason": self.reason,
            "kind": self.kind,
            "details": dict(self.details),
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True)
class Verdict:
    """The harness's conclusion about one design: every validator's result, in graph order."""

    results: tuple[ValidatorResult, ...]

    @property
    def status(self) -> VerdictStatus:
        failed = [r for r in self.results if r.outcome == "failed"]
        if any(r.kind in ERROR_KINDS for r in failed):
            return "error"
        if any(r.kind == "needs_gpu" for r in failed):
            return "needs_gpu"  # not wrong, just not runnable here
        if failed or any(r.outcome != "passed" for r in self.results):
            return "invalid"
        return "valid"

    @property
    def failures(self) -> tuple[ValidatorResult, ...]:
        return tuple(r for r in self.results if r.outcome == "failed")

    def result(self, name: str) -> ValidatorResult | None:
        return next((r for r in self.results if r.name == name), None)

    def report(self) -> str:
        """All failures in one text block: what an agent sees after an evaluation."""
        if self.status == "valid":
            return "All validators passed."
        lines = [f"[{r.name}] {r.kind}: {r.reason}" for r in self.failures]
        skipped = [r for r in self.results if r.outcome == "skipped"]
        if skipped:
            lines.append("Skipped: " + "; ".join(f"{r.name} ({r.reason})" for r in skipped))
        return "\n".join(lines)


INCONCLUSIVE_KINDS = frozenset({"timeout", "oom", "harness_error", "needs_gpu"})
"""Audit failures that show nothing about the design: the audit could not finish (its run limit
on a loaded machine, memory, the harness). Such a design is unaudited, never judged cheating:
on a loaded 2-core machine an audit killed at its 120 s run limit was recorded as "judged
cheating" and once written as a breach fixture with no gain shown."""


def inconclusive(verdict: Verdict | str) -> str | None:
    """Why an audit's verdict says nothing about the design (it could not run or finish), or None."""
    if isinstance(verdict, str):
        return verdict
    if verdict.status == "error":
        return verdict.report()
    first = verdict.failures[0] if verdict.failures else None
    if first is not None and first.kind in INCONCLUSIVE_KINDS:
        return f"the audit did not finish: [{first.name}] {first.reason}"
    return None
