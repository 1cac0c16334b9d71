"""Owns the Implementor: one persistent conversation that writes a candidate and fixes it until
it validates.

The output is a `CandidateOutput` (the whole design as the domain's prompts ask for it, and notes). An output validator runs
the static checks, so a malformed or cheating answer costs one output retry, not an evaluation.
Each answer is evaluated through the Session by the shared fix loop (`fix_loop.py`); a failure
report goes back into the same conversation, with what the other writers measured since it began. The first answer is labelled with the plan's
strategy, every later one `fix` (how it was made: after a failure report). The loop stops at a valid design, after `implementor_max_attempts` evaluations,
when the conversation has used `implementor_token_limit` tokens, when a run budget is exhausted,
or on an LLM failure; the result says which (failures are data).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from stratagem.agents.calls import AgentRuntime, run_agent
from stratagem.agents.fix_loop import Attempt, FixLimits, FixResult, Written, fix_until_valid
from stratagem.agents.tools import BaseDeps, Workdir, base_toolset, probe_toolset, session_probe
from stratagem.agents.writers import ModelWriter, WriteRequest, writer_for
from stratagem.config import EvaluationConfig
from stratagem.context import render
from stratagem.context.run_view import InFlight, news
from stratagem.core.design import text_files
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, Feedback, Plan, ProbeMode, Session
from stratagem.core.template import TemplateError, is_template, parse_template
from stratagem.core.verdict import ValidatorResult
from stratagem.domains import get_domain
from stratagem.domains.base import Precheck

REQUEST_LIMIT = 40
"""Model requests one Implementor turn may make (tool calls and output retries included)."""

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


class CandidateOutput(BaseModel):
    """An Implementor's answer."""

    source: str = Field(description="the complete design, as the task asks for it, without Markdown fences")
    notes: str = Field(default="", description="what this version does, briefly")


@dataclass
class ImplementorDeps(BaseDeps):
    """The static precheck the output validator runs, and what it rejected."""

    precheck: Precheck | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """(source, reason) of every answer the static checks rejected."""


def lineage(plan: Plan) -> tuple[str, ...]:
    """The parents of a plan's designs: the designs it builds on, and none for `innovate` (a new
    idea descends from nothing, even when its plan cites designs as evidence)."""
    return () if plan.strategy == "innovate" else tuple(plan.evidence)


def strip_fences(source: str) -> str:
    """The code inside a Markdown fence, if the whole answer is one; else the text unchanged."""
    m = _FENCE.match(source)
    return (m.group(1) if m else source).strip("\n") + "\n"


def checked_text(source: str) -> str:
    """What the static checks read of an answer: a template (docs/tune.md: the loop tunes it)
    rendered at its defaults, so a placeholder is not taken for broken code; any other answer,
    and a template that cannot be read or rendered (the loop records why), as it is."""
    files = {"design": source}
    if not is_template(files):
        return source
    try:
        t = parse_template(files)
        point = t.defaults if not t.violations(t.defaults) else next(t.points(), t.defaults)
        return t.render(point)["design"]
    except TemplateError:
        return source


def build_implementor(
    *, output_retries: int = 2, model: Model | None = None, domain: str,
    tools: Sequence[ProbeMode] = (),
) -> Agent[ImplementorDeps, CandidateOutput]:
    """A fresh Implementor (told in `domain`'s words) whose output validator runs the static
    checks, with the harness's `tools` (`check`, `profile`) besides its base tools."""
    agent: Agent[ImplementorDeps, CandidateOutput] = Agent(
        model, output_type=CandidateOutput, deps_type=ImplementorDeps, name="implementor",
        instructions=render.instructions("implementor", domain=domain),
        toolsets=[base_toolset(), probe_toolset(tools)],
        retries={"output": output_retries, "tools": max(output_retries, 2)},
    )

    @agent.output_validator
    def static_checks(ctx: RunContext[ImplementorDeps], out: CandidateOutput) -> CandidateOutput:
        source = strip_fences(out.source)
        deps = ctx.deps
        if deps.precheck is not None:
            result: ValidatorResult = deps.precheck(checked_text(source))
            if result.outcome == "failed":
                reason = result.reason or "rejected"
                deps.rejected.append((source, reason))
                raise ModelRetry(render.fill("implementor", "static_rejection", domain=domain, reason=reason))
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
    precheck: Precheck | None = None
    """The domain's static checks for an answer (None: its default ones for this problem)."""
    report_chars: int = 1_200
    variant: str = ""
    """This Implementor's own part of the plan (`Plan.variants`); '' when the plan has none."""
    start_files: Mapping[str, str] = field(default_factory=dict[str, str])
    """The design the first turn builds on, whole (`starting_files`): a coding agent finds it in
    its work directory; empty for a new design."""
    designs: Sequence[DesignView] = ()
    """The run's designs when the iteration began: the prompt shows the whole run's best and
    newest results from them (`run_view.run_so_far`)."""
    in_flight: Sequence[InFlight] = ()
    """The other Implementors of the iteration, asked at once with this one."""

    def flying(self) -> InFlight:
        """How the other Implementors see this one: its plan's strategy, start and variant."""
        parents = lineage(self.plan)
        return InFlight(self.worker, self.plan.strategy, parents[0] if parents else None, self.variant)


def starting_files(plan: Plan, designs: Sequence[DesignView], main: str) -> dict[str, str]:
    """The design an Implementor's first turn builds on (what a coding agent finds in its work
    directory): the first of `designs` in the plan's lineage (none for `innovate`)."""
    parents = lineage(plan)
    first = next((v for v in designs if v.id in parents), None)
    return text_files(first.source, main) if first is not None else {}


@dataclass(frozen=True)
class ImplementorResult(FixResult):
    """How one Implementor's conversation ended: the fix loop's result, and whose it was."""

    worker: str = ""


async def run_implementor(
    task: ImplementorTask, session: Session, runtime: AgentRuntime
) -> ImplementorResult:
    """Write, evaluate and fix one design in one conversation (the shared fix loop with the
    Implementor's prompts); never raises for LLM failures."""
    cfg = runtime.cfg
    precheck = task.precheck or get_domain(task.problem.domain).open(task.problem, EvaluationConfig()).precheck("cuda")
    deps = ImplementorDeps(workdir=Workdir(task.workdir), precheck=precheck,
                           probe=session_probe(session, task.worker), probes=session.probes())
    agent = build_implementor(output_retries=cfg.output_retries, domain=task.brief.domain, tools=deps.probes)
    agent_instructions = render.instructions("implementor", domain=task.brief.domain)
    history: list[ModelMessage] = []
    prompt = render.render_implementor(
        task.brief, task.plan, task.evidence, worker=task.worker,
        max_attempts=cfg.implementor_max_attempts, report_chars=task.report_chars, variant=task.variant,
        designs=task.designs, in_flight=task.in_flight,
    )

    async def model_turn(req: WriteRequest) -> Written:
        nonlocal history
        outcome = await run_agent(
            agent, req.prompt, role="implementor", runtime=runtime, deps=deps, history=history,
            usage_limits=UsageLimits(total_tokens_limit=req.tokens_left, request_limit=REQUEST_LIMIT),
        )
        if not outcome.ok or outcome.output is None:
            return Written(None, outcome.total_tokens, outcome.error_kind, outcome.error)
        history = outcome.messages
        return Written(outcome.output.source, outcome.total_tokens)

    writer = writer_for(runtime.writers, "implementor", ModelWriter(model_turn))
    main = get_domain(task.problem.domain).main_file(task.problem)
    current: dict[str, str] = dict(task.start_files)

    async def write(text: str, tokens_left: int | None) -> Written:
        nonlocal current
        w = await writer.write(WriteRequest(
            role="implementor", worker=task.worker, prompt=text, problem=task.problem,
            instructions=agent_instructions, files=current, tokens_left=tokens_left, record=runtime.record,
            meter=runtime.meter))
        if w.source is not None:
            current = text_files(w.source, main)
        return w

    told = [v.id for v in task.designs]
    """The designs the conversation has been shown as results (the run's, then each turn's news)."""

    def next_prompt(fb: Feedback, attempts: int) -> str:
        now = session.views()
        new = news(now, told, task.worker, task.brief.domain)
        told.extend(v.id for v in now)
        return render.render_implementor_feedback(fb, attempt=attempts, max_attempts=cfg.implementor_max_attempts,
                                                  domain=task.brief.domain, news=new)

    res = await fix_until_valid(
        session, task.worker, prompt=prompt, write=write, next_prompt=next_prompt,
        limits=FixLimits(cfg.implementor_max_attempts, cfg.implementor_token_limit),
        strategy=task.plan.strategy, parents=lineage(task.plan), accept_restated=False,
        describe=lambda attempt, _previous: Attempt(task.plan.strategy if attempt == 1 else "fix", lineage(task.plan)),
    )
    if res.failed_turn is not None:
        res = await _after_failure(task, session, deps, res, cfg.implementor_token_limit)
    return ImplementorResult(**{f.name: getattr(res, f.name) for f in fields(FixResult)}, worker=task.worker)


async def _after_failure(
    task: ImplementorTask, session: Session, deps: ImplementorDeps, res: FixResult, limit: int,
) -> FixResult:
    """The reason a failed turn ended the conversation; a candidate the static checks kept
    rejecting is still evaluated once (cheaply, it fails the static stage) so it is logged as
    failed."""
    turn = res.failed_turn
    assert turn is not None
    if turn.error_kind == "budget":
        reason = res.reason  # the run's budget stopped the turn: nothing more to ask
    elif turn.error_kind == "usage_limit":
        reason = f"token limit reached ({res.tokens} of {limit} tokens)"
    elif turn.error_kind == "output" and deps.rejected and session.budget_left() is None:
        source, why = deps.rejected[-1]
        session.set_status(task.worker, f"attempt {res.attempts + 1}: logging the rejected candidate")
        fb = await session.evaluate(source, strategy=task.plan.strategy, parents=lineage(task.plan),
                                    author=task.worker)
        res = replace(res, attempts=res.attempts + 1, design_ids=tuple(dict.fromkeys((*res.design_ids, fb.design_id))),
                      feedback=fb)
        reason = f"the static checks kept rejecting the candidate: {why}"
    else:
        reason = f"LLM failure: {turn.error}"
    session.set_status(task.worker, f"failed: {reason}"[:120])
    return replace(res, reason=reason)
