"""Owns the Strategist: one agent run per iteration that picks AUTO's strategy and writes the plan.

Its output is a `PlanOutput` (strategy, evidence ids, rationale, shared instructions, and one
distinct variant per Implementor). An output validator resolves the cited ids (full or unique
prefixes) against every design of the run, the set the Analyst reads from too (the Strategist
is shown the curated few, the Analyst may name any: a plan citing a design the Analyst named
was refused when only the curated ids counted), and checks the evidence fits the strategy;
anything wrong is sent back as a retry. Its only tool, with the Analyst enabled, is
`ask_analyst(question)`, which runs the Analyst as a child agent; it gets no file or
scratchpad tools (its work directory would be new and empty each iteration, and nothing reads
what it writes there).
`plan_iteration` returns the plan, or None with the reason (a failure is data).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.models import Model

from stratagem.agents.calls import AgentRuntime, CallOutcome, run_agent
from stratagem.agents.tools import BaseDeps, probe_toolset
from stratagem.context import render
from stratagem.context.curate import Curated
from stratagem.core.search import DesignView, Plan, ProbeMode, Strategy

MIN_PREFIX = 6
MIN_EVIDENCE: dict[str, int] = {"innovate": 0, "refine": 1, "reattempt_failure": 1, "combine": 2}


class PlanOutput(BaseModel):
    """The Strategist's answer."""

    strategy: Strategy
    evidence: list[str] = Field(
        default_factory=list,
        description="ids (or unique prefixes) of the designs of this run that the plan builds on",
    )
    rationale: str = Field(description="why this strategy now, from the evidence")
    instructions: str = Field(description="concrete implementation steps all the Implementors share")
    variants: list[str] = Field(
        default_factory=list,
        description="one distinct variant per Implementor (at most as many as there are Implementors): "
                    "what that Implementor does differently (a tile size, an algorithm, a precision)",
    )


@dataclass
class StrategistDeps(BaseDeps):
    """The ids the plan may cite (every design of the run), and the Analyst (when enabled)."""

    known_ids: Sequence[str] = ()
    """Every design of the run, the ones shown to the Strategist first."""
    shown_ids: Sequence[str] = ()
    """The designs its prompt shows (named in a retry)."""
    failed_ids: Sequence[str] = ()
    implementors: int = 1
    """How many Implementors the plan may give variants to."""
    ask: Callable[[str], Awaitable[str]] | None = None
    analyst_docs: bool = False
    """The Analyst it asks can search the problem's documentation (else no prompt says so)."""
    questions: list[str] = field(default_factory=list)


def resolve_ids(cited: Sequence[str], known: Sequence[str]) -> tuple[list[str], list[str]]:
    """(full ids, problems): each cited id must be a known id or a unique prefix of one."""
    out: list[str] = []
    problems: list[str] = []
    for ref in cited:
        r = ref.strip().strip("`")
        matches = [k for k in known if k == r] or (
            [k for k in known if k.startswith(r)] if len(r) >= MIN_PREFIX else []
        )
        if len(matches) == 1:
            if matches[0] not in out:
                out.append(matches[0])
        elif not matches:
            problems.append(f"{ref!r} is not the id of a design of this run")
        else:
            problems.append(f"{ref!r} matches several designs; give more characters")
    return out, problems


def _check_plan(deps: StrategistDeps, out: PlanOutput) -> PlanOutput:
    ids, problems = resolve_ids(out.evidence, deps.known_ids)
    need = MIN_EVIDENCE[out.strategy]
    if len(ids) < need:
        problems.append(f"strategy {out.strategy!r} must cite at least {need} design(s)"
                        + ("" if len(deps.known_ids) >= need else "; choose another strategy"))
    if out.strategy == "reattempt_failure" and ids and not set(ids) & set(deps.failed_ids):
        problems.append("reattempt_failure must cite a failed design")
    if not out.instructions.strip():
        problems.append("instructions are empty")
    variants = [v.strip() for v in out.variants if v.strip()]
    if len(variants) > deps.implementors:
        problems.append(f"give at most {deps.implementors} variants (one per Implementor), not {len(variants)}")
    if len({v.lower() for v in variants}) < len(variants):
        problems.append("the variants must differ from each other: each Implementor explores its own point")
    if problems:
        shown = ", ".join(render.short_id(k) for k in deps.shown_ids) or "none"
        others = len(set(deps.known_ids) - set(deps.shown_ids))
        more = (f" (and {others} other designs of the run" + (", which the Analyst can read)" if deps.ask else ")")
                if others else "")
        raise ModelRetry("Fix the plan: " + "; ".join(problems) + f". Design ids shown: {shown}{more}.")
    return out.model_copy(update={"evidence": ids, "variants": variants})


def build_strategist(
    *, analyst: bool, output_retries: int = 2, model: Model | None = None, domain: str,
    tools: Sequence[ProbeMode] = (), docs: bool = False,
) -> Agent[StrategistDeps, PlanOutput]:
    """A fresh Strategist (told in `domain`'s words); with `analyst`, it gets the `ask_analyst`
    tool (told that the Analyst searches documentation only where there are `docs`), and the
    harness's `profile` when it is among `tools` (and no other)."""
    agent: Agent[StrategistDeps, PlanOutput] = Agent(
        model, output_type=PlanOutput, deps_type=StrategistDeps, name="strategist",
        instructions=render.instructions("strategist", domain=domain, analyst=analyst, profile="profile" in tools,
                                         docs=docs),
        toolsets=[probe_toolset([m for m in tools if m == "profile"])],
        retries={"output": output_retries, "tools": max(output_retries, 2)},
    )

    @agent.output_validator
    def validate(ctx: RunContext[StrategistDeps], out: PlanOutput) -> PlanOutput:
        return _check_plan(ctx.deps, out)

    if analyst:
        does = ("reads any design in full, diffs two designs, compares what the harness measured of them and "
                "searches the problem's documentation" if docs else
                "reads any design in full, diffs two designs and compares what the harness measured of them")

        @agent.tool(description=f"Ask the Analyst a question before you decide: it {does}, and answers in a "
                                "few paragraphs.")
        async def ask_analyst(ctx: RunContext[StrategistDeps], question: str) -> str:
            """Ask the Analyst a question before you decide.

            Args:
                question: a specific question (name the designs by id).
            """
            if ctx.deps.ask is None:
                return "the Analyst is not available"
            ctx.deps.questions.append(question)
            return await ctx.deps.ask(question)

    return agent


@dataclass(frozen=True)
class StrategistResult:
    """The plan (None when the Strategist failed) and the run's outcome."""

    plan: Plan | None
    outcome: CallOutcome[PlanOutput]

    @property
    def error(self) -> str | None:
        return None if self.plan is not None else (self.outcome.error or "no plan")


async def plan_iteration(
    problem: render.ProblemBrief,
    curated: Curated,
    runtime: AgentRuntime,
    deps: StrategistDeps,
    *,
    designs: Sequence[DesignView],
    iteration: int,
    implementors: int = 1,
    budget: render.BudgetBrief | None = None,
) -> StrategistResult:
    """Run the Strategist once on the curated context, for `implementors` Implementors, told
    the run's `budget` (what is spent and left, and whether this is the last iteration); the
    plan may cite any of `designs` (the run's, which the Analyst reads from)."""
    deps.shown_ids = curated.ids
    deps.known_ids = tuple(dict.fromkeys([*curated.ids, *(d.id for d in designs)]))
    deps.implementors = implementors
    every = {d.id: d for d in [*designs, *curated.designs]}
    deps.failed_ids = tuple(i for i, d in every.items() if d.status != "valid")
    agent = build_strategist(analyst=deps.ask is not None, output_retries=runtime.cfg.output_retries,
                             domain=problem.domain, tools=deps.probes, docs=deps.analyst_docs)
    prompt = render.render_strategist(problem, curated, iteration=iteration, implementors=implementors,
                                      budget=budget)
    outcome = await run_agent(agent, prompt, role="strategist", runtime=runtime, deps=deps)
    out = outcome.output
    if not outcome.ok or out is None:
        return StrategistResult(None, outcome)
    plan = Plan(strategy=out.strategy, evidence=tuple(out.evidence),
                rationale=out.rationale.strip(), instructions=out.instructions.strip(),
                variants=tuple(out.variants))
    return StrategistResult(plan, outcome)
