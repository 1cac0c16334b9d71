"""Owns the Implementor: one persistent conversation that writes a candidate and fixes it until
it validates.

The output is a `CandidateOutput` (the whole `candidate.py` and notes). An output validator runs
the static checks, so a malformed or cheating answer costs one output retry, not an evaluation.
Each answer is evaluated through the Session; a failure report goes back into the same
conversation. The loop stops at a valid design, after `implementor_max_attempts` evaluations,
when the conversation has used `implementor_token_limit` tokens, when a run budget is exhausted,
or on an LLM failure; the result says which (failures are data).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from stratagem.agents.calls import AgentRuntime, run_agent
from stratagem.agents.tools import BaseDeps, Workdir, base_toolset
from stratagem.context import render
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.static import DEFAULT_CHECKS, StaticCheck, run_static_checks
from stratagem.search.types import DesignView, Feedback, Plan, Session

REQUEST_LIMIT = 40
"""Model requests one Implementor turn may make (tool calls and output retries included)."""

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


class CandidateOutput(BaseModel):
    """An Implementor's answer."""

    source: str = Field(description="the complete candidate.py, plain Python without fences")
    notes: str = Field(default="", description="what this version does, briefly")


@dataclass
class ImplementorDeps(BaseDeps):
    """The problem and checks the output validator needs, and what it rejected."""

    problem: Problem | None = None
    checks: Sequence[StaticCheck] = DEFAULT_CHECKS
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """(source, reason) of every answer the static checks rejected."""


def strip_fences(source: str) -> str:
    """The code inside a Markdown fence, if the whole answer is one; else the text unchanged."""
    m = _FENCE.match(source)
    return (m.group(1) if m else source).strip("\n") + "\n"


def build_implementor(
    *, output_retries: int = 2, model: Model | None = None
) -> Agent[ImplementorDeps, CandidateOutput]:
    """A fresh Implementor whose output validator runs the static checks."""
    agent: Agent[ImplementorDeps, CandidateOutput] = Agent(
        model, output_type=CandidateOutput, deps_type=ImplementorDeps, name="implementor",
        instructions=render.instructions("implementor"),
        toolsets=[base_toolset()],
        retries={"output": output_retries, "tools": max(output_retries, 2)},
    )

    @agent.output_validator
    def static_checks(ctx: RunContext[ImplementorDeps], out: CandidateOutput) -> CandidateOutput:
        source = strip_fences(out.source)
        deps = ctx.deps
        if deps.problem is not None:
            result = run_static_checks(deps.problem, source, checks=deps.checks)
            if result.outcome == "failed":
                reason = result.reason or "rejected"
                deps.rejected.append((source, reason))
                raise ModelRetry(render.fill("implementor", "static_rejection", reason=reason))
        return out.model_copy(update={"source": source})

    return agent


@dataclass(frozen=True)
class ImplementorTask:
    """What one Implementor builds, and from what."""

    worker: str
    """`implementor-1`, ...: the author of its designs and its live-view name."""
    plan: Plan
    problem: Problem
    brief: render.ProblemBrief
    workdir: Path
    """The Implementor's private work directory (its file tools are confined to it)."""
    evidence: tuple[DesignView, ...] = ()
    checks: Sequence[StaticCheck] = DEFAULT_CHECKS
    report_chars: int = 1_200


@dataclass(frozen=True)
class ImplementorResult:
    """How one Implementor's conversation ended."""

    worker: str
    status: Literal["valid", "failed"]
    reason: str
    design_ids: tuple[str, ...] = ()
    attempts: int = 0
    """Evaluations requested."""
    tokens: int = 0
    """Tokens the conversation used (input and output, all turns)."""
    feedback: Feedback | None = None
    """The last evaluation's feedback."""
    error_kinds: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "valid"


@dataclass
class _Progress:
    tokens: int = 0
    attempts: int = 0
    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    feedback: Feedback | None = None
    history: list[ModelMessage] = field(default_factory=list)


async def run_implementor(
    task: ImplementorTask, session: Session, runtime: AgentRuntime
) -> ImplementorResult:
    """Write, evaluate and fix one design in one conversation; never raises for LLM failures."""
    cfg = runtime.cfg
    agent = build_implementor(output_retries=cfg.output_retries)
    deps = ImplementorDeps(workdir=Workdir(task.workdir), problem=task.problem, checks=task.checks)
    p = _Progress()
    prompt = render.render_implementor(
        task.brief, task.plan, task.evidence, worker=task.worker,
        max_attempts=cfg.implementor_max_attempts, report_chars=task.report_chars,
    )

    def done(status: Literal["valid", "failed"], reason: str) -> ImplementorResult:
        session.set_status(task.worker, f"{status}: {reason}"[:120])
        return ImplementorResult(task.worker, status, reason, tuple(dict.fromkeys(p.ids)),
                                 p.attempts, p.tokens, p.feedback, tuple(p.kinds))

    limit = cfg.implementor_token_limit
    while True:
        if (exhausted := session.budget_left()) is not None:
            return done("failed", f"the run's {exhausted} budget is exhausted")
        if p.attempts >= cfg.implementor_max_attempts:
            return done("failed", f"no valid design after {p.attempts} evaluations")
        if p.tokens >= limit:
            return done("failed", f"token limit reached ({p.tokens} of {limit} tokens)")
        session.set_status(task.worker, f"attempt {p.attempts + 1}: writing")
        outcome = await run_agent(
            agent, prompt, role="implementor", runtime=runtime, deps=deps, history=p.history,
            usage_limits=UsageLimits(total_tokens_limit=limit - p.tokens,
                                     request_limit=REQUEST_LIMIT),
        )
        p.tokens += outcome.total_tokens
        if not outcome.ok or outcome.output is None:
            p.kinds.append(outcome.error_kind or "other")
            return await _after_failure(task, session, deps, p, outcome.error_kind, outcome.error,
                                        limit, done)
        p.history = outcome.messages
        p.attempts += 1
        session.set_status(task.worker, f"attempt {p.attempts}: evaluating")
        fb = await session.evaluate(outcome.output.source, strategy=task.plan.strategy,
                                    parents=task.plan.evidence, author=task.worker)
        p.ids.append(fb.design_id)
        p.feedback = fb
        if fb.status in ("valid", "unreviewed", "unstable"):  # the harness passed it; a review or a re-timing is not its job
            speed = f" ({fb.speedup:.3g}x)" if fb.speedup is not None else ""
            return done("valid", f"valid after {p.attempts} evaluation(s){speed}")
        prompt = render.render_implementor_feedback(
            fb, attempt=p.attempts, max_attempts=cfg.implementor_max_attempts
        )


async def _after_failure(
    task: ImplementorTask,
    session: Session,
    deps: ImplementorDeps,
    p: _Progress,
    kind: str | None,
    error: str | None,
    limit: int,
    done: Callable[[Literal["valid", "failed"], str], ImplementorResult],
) -> ImplementorResult:
    """End the conversation after a failed turn; a candidate the static checks kept rejecting is
    still evaluated once (cheaply, it fails the static stage) so it is logged as failed."""
    if kind == "usage_limit":
        return done("failed", f"token limit reached ({p.tokens} of {limit} tokens)")
    if kind == "output" and deps.rejected and session.budget_left() is None:
        source, reason = deps.rejected[-1]
        p.attempts += 1
        session.set_status(task.worker, f"attempt {p.attempts}: logging the rejected candidate")
        fb = await session.evaluate(source, strategy=task.plan.strategy,
                                    parents=task.plan.evidence, author=task.worker)
        p.ids.append(fb.design_id)
        p.feedback = fb
        return done("failed", f"the static checks kept rejecting the candidate: {reason}")
    return done("failed", f"LLM failure: {error}")
