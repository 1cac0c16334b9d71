"""Test doubles for the run loop: an evaluator that reads its verdict from markers in the
candidate source (no worker, no torch), and a policy that replays scripted designs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, IterationResult, Plan, Review, SearchState, Session
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.evaluation.results import Baseline, Evaluation

EAGER_MS = 1.0


COMPILE_MS = 0.8


def stats(ms: float) -> dict[str, object]:
    return {"median_ms": ms, "q1_ms": ms, "q3_ms": ms, "samples_ms": [ms, ms, ms]}


def fake_baseline(problem_id: str, cached: bool, compared_fails: str | None = None,
                  compared_unstable: str | None = None) -> Baseline:
    r = EAGER_MS / COMPILE_MS
    check = {"ok": False, "reason": compared_fails} if compared_fails else {"ok": True}
    stability = ({"verdict": "unstable", "reasons": [compared_unstable], "notes": []} if compared_unstable
                 else {"verdict": "stable", "reasons": [], "notes": []})
    return Baseline(problem_id, {"eager": stats(EAGER_MS),
                                 "compile": {**stats(COMPILE_MS), "vs_eager": {"ratio": r, "low": r, "high": r},
                                             "correctness": check, "stability": stability}},
                    {}, cached, Verdict(()), "eager")


def timing_details(ms: float, unstable: bool = False, ci: float = 0.01, busy: bool = False) -> dict[str, object]:
    """What the paired timing stage reports for a design at `ms` beside eager at EAGER_MS."""
    r = EAGER_MS / ms
    verdict = "busy" if busy else "unstable" if unstable else "stable"
    reasons = {"busy": ["not measured: the machine was busy (scripted)"], "unstable": ["ratio spread: scripted"]}
    return {"runtime": stats(ms), "reference": stats(EAGER_MS),
            "speedup": {"ratio": r, "low": r * (1 - ci), "high": r * (1 + ci), "pairs": 12},
            "stability": {"verdict": verdict, "reasons": reasons.get(verdict, []), "notes": []}}


class FakeEvaluator:
    """`# runtime_ms=0.5` in the source: valid at that time (paired beside eager at EAGER_MS,
    interval +-1%, or `# ci=0.2` for +-20%); `# unstable`: its timing stays unstable;
    `# busy`: not measured, the machine was busy; `# invalid: why`: wrong output
    (`# max_abs_err=0.5`: by that much)."""

    physical_device = "cpu"
    on_gpu = False

    def __init__(self, delay_s: float = 0.0, seconds_per_eval: float = 1.0, compared_fails: str | None = None,
                 compared_unstable: str | None = None) -> None:
        self.compared_fails = compared_fails
        self.compared_unstable = compared_unstable
        """Why the fake torch.compile baseline's timing is unstable (None: it is stable)."""
        """Why the fake torch.compile baseline fails the correctness rule (None: it passes)."""
        self.baselines: list[bool] = []
        """`refresh` of each baseline measurement."""
        self.calls: list[str] = []
        self.refreshes: list[bool] = []
        """`refresh_baseline` of each call: a refreshed baseline comes back as not cached."""
        self.delay_s = delay_s
        self.seconds_per_eval = seconds_per_eval
        self.confirm_blocks: list[list[str]] = []
        """The order of each confirmation block asked for."""
        self.confirm_target = 0.0
        """The timing's `target_halfwidth` its blocks report (0: a round never stops early)."""

    async def baseline(self, problem: Problem, *, refresh: bool = False, **_: object) -> Baseline:
        self.baselines.append(refresh)
        return fake_baseline(problem.id, not refresh, self.compared_fails, self.compared_unstable)

    async def evaluate(
        self, problem: Problem, design: Design, *, refresh_baseline: bool = False,
        baseline: Baseline | None = None, **_: object
    ) -> Evaluation:
        self.calls.append(design.id)
        self.refreshes.append(refresh_baseline)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        src = design.files["candidate.py"]
        if "# harness_error" in src:
            results = (ValidatorResult("load", "failed", reason="worker could not start",
                                       kind="harness_error", duration_s=0.1),)
            return Evaluation(problem=problem, design=design, verdict=Verdict(results), device="cpu",
                              environment={}, seeds=(1,), baseline=None)
        bad = re.search(r"# invalid: (.*)", src)
        ms = re.search(r"# runtime_ms=([0-9.]+)", src)
        d = self.seconds_per_eval
        if bad or not ms:
            results = (ValidatorResult("static_checks", "passed", duration_s=0.0),
                       ValidatorResult("correctness", "failed", reason=bad.group(1) if bad else "no marker",
                                       kind="wrong_output", duration_s=d,
                                       details={"max_abs_err": float(m.group(1))}
                                       if (m := re.search(r"# max_abs_err=([0-9.e-]+)", src)) else {}),
                       ValidatorResult("timing", "skipped", reason="needs correctness"))
            baseline = None
        else:
            results = (ValidatorResult("static_checks", "passed", duration_s=0.0),
                       ValidatorResult("correctness", "passed", duration_s=d / 2),
                       ValidatorResult("timing", "passed",
                                       details=timing_details(float(ms.group(1)), "# unstable" in src,
                                                              float(ci.group(1)) if (ci := re.search(r"# ci=([0-9.]+)", src)) else 0.01,
                                                              busy="# busy" in src),
                                       duration_s=d / 2))
            baseline = baseline or fake_baseline(problem.id, not refresh_baseline, self.compared_fails, self.compared_unstable)
        return Evaluation(problem=problem, design=design, verdict=Verdict(results), device="cpu",
                          environment={}, seeds=(1,), baseline=baseline)

    @property
    def cfg(self) -> object:
        from stratagem.config import EvaluationConfig

        return EvaluationConfig(baselines=["eager", "compile"])

    async def confirm_block(self, problem: Problem, designs: dict[str, str], order: list[str],
                            reference_ms: float | None = None,
                            on_stage: Callable[[str], None] | None = None) -> dict[str, object]:
        """A block of a confirmation round: each design at its `# runtime_ms` (`# confirmed_ms`
        when given: what an independent re-timing measures), torch.compile at COMPILE_MS; its
        stages said as a worker says them."""
        for name in ("load", "confirm"):
            (on_stage or (lambda _s: None))(name)
        self.confirm_blocks.append(list(order))
        programs: dict[str, object] = {}
        for name in order:
            ci = 0.01
            if name == "compile":
                ms = COMPILE_MS
            else:
                src = designs[name]
                m = re.search(r"# confirmed_ms=([0-9.]+)", src) or re.search(r"# runtime_ms=([0-9.]+)", src)
                ms = float(m.group(1)) if m else EAGER_MS
                ci = float(c.group(1)) if (c := re.search(r"# ci=([0-9.]+)", src)) else ci
            r = EAGER_MS / ms
            ratios = [r * (1 + ci * ((k % 5) - 2) / 2) for k in range(12)]  # as noisy as its search timing
            cond = {"speedup": {"ratio": r, "low": r, "high": r}, "pair_ratios": ratios, "pairs": 12,
                    "median_ms": ms, "reference_ms": EAGER_MS}
            programs[name] = {"fresh": cond, "warm": cond}
        return {"order": list(order), "programs": programs, "environment": {},
                "target_halfwidth": self.confirm_target}


@dataclass
class ScriptedPolicy:
    """Each iteration evaluates the next list of sources; `exhausted` after the script ends."""

    script: list[list[str]]
    name: str = "scripted"
    reviews: dict[str, Review] = field(default_factory=dict)
    seen: list[SearchState] = field(default_factory=list)
    on_iterate: Callable[[int], None] | None = None

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        self.seen.append(state)
        i = len(self.seen) - 1
        if self.on_iterate is not None:
            self.on_iterate(i)
        if i >= len(self.script):
            return IterationResult(plan=None, exhausted=True)
        ids = []
        for k, src in enumerate(self.script[i]):
            if session.budget_left():
                break
            author = m.group(1) if (m := re.search(r"# author=(\S+)", src)) else f"implementor-{k + 1}"
            fb = await session.evaluate(src, strategy="innovate", author=author)
            ids.append(fb.design_id)
        return IterationResult(plan=Plan("innovate", rationale="scripted"), design_ids=tuple(ids))

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        for marker, review in self.reviews.items():
            if marker in design.source:
                return review
        return None


def src(tag: str, runtime_ms: float | None = None, invalid: str | None = None) -> str:
    """A fake design: its verdict in marker comments (the fake evaluator reads them), and the
    same markers in a constant, so designs that differ in markers are different programs (the
    loop links a design that differs only in comments to the earlier one)."""
    lines = [f"# design {tag}", "class ModelNew: pass"]
    if runtime_ms is not None:
        lines.append(f"# runtime_ms={runtime_ms}")
    if invalid is not None:
        lines.append(f"# invalid: {invalid}")
    lines.append(f"_MARKS = {' | '.join(lines[:1] + lines[2:])!r}")
    return "\n".join(lines) + "\n"


def sources(*items: tuple[str, float | None]) -> Sequence[str]:
    return [src(t, ms) for t, ms in items]
