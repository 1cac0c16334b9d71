"""Owns the `auto` policy: AUTO's iteration of curate -> Strategist (+ Analyst) -> K concurrent
Implementors, and the Analyst's review of designs that look too good to be true.

Nothing an LLM does stops a run: a failed Strategist is replaced by a default plan (`refine` the
best design, or `innovate` when there is none) and the iteration says so in its note; failed
Implementors end with a reason. When every agent call of an iteration failed because the model
is unusable (bad key, unknown model, no quota) the policy reports itself exhausted, so the loop
stops cleanly instead of burning the remaining iterations. Only infrastructure errors (the
harness) and cancellation propagate.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from stratagem.agents.agent_command import command_routes
from stratagem.agents.analyst import (
    AnalystDeps,
    ask_analyst,
    designs_by_id,
    has_docs,
    review_design,
)
from stratagem.agents.calls import FATAL, AgentRuntime
from stratagem.agents.docs import DocIndex
from stratagem.agents.implementor import (
    ImplementorResult,
    ImplementorTask,
    run_implementor,
    starting_files,
)
from stratagem.agents.models import RoleModels, choose_models, preflight, quiet_library
from stratagem.agents.offline import offline_models
from stratagem.agents.strategist import StrategistDeps, StrategistResult, plan_iteration
from stratagem.agents.tools import Workdir, session_probe
from stratagem.config import StratagemConfig
from stratagem.context import render
from stratagem.context.curate import Curated, curate, fit_cited
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, IterationResult, Plan, Review, SearchState, Session
from stratagem.domains import get_domain
from stratagem.search.policies.handoff import handoff_session

SleepFn = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class AutoIterationResult(IterationResult):
    """An `auto` iteration: the plan, the designs, and what the Strategist was shown."""

    implementors: tuple[ImplementorResult, ...] = ()
    strategist_ok: bool = True


def role_models(
    cfg: StratagemConfig, problem: Problem, injected: Mapping[str, object] | None = None
) -> RoleModels:
    """Which models serve which role: injected ones (tests), the scripted `test` models, or the
    configured model / endpoints for every role.

    Raises:
        ConfigError: no model configured and none injected, or the model cannot be built.
    """
    return choose_models(cfg.agents, lambda: offline_models(problem), injected)


class AutoPolicy:
    """AUTO: strategic search with a Strategist, an Analyst and concurrent Implementors."""

    name = "auto"

    def __init__(
        self,
        cfg: StratagemConfig,
        problem: Problem,
        workdir: Path,
        models: RoleModels,
        *,
        sleep: SleepFn = asyncio.sleep,
    ) -> None:
        quiet_library()
        self.cfg = cfg
        self.problem = problem
        self.workdir = Path(workdir)
        self.runtime = AgentRuntime(cfg=cfg.agents, models=models, sleep=sleep,
                                    writers=command_routes(cfg, self.workdir))
        self.domain = get_domain(problem.domain)
        self._docs: DocIndex | None = None
        self._docs_loaded = False

    @classmethod
    def from_config(
        cls,
        cfg: StratagemConfig,
        problem: Problem,
        workdir: Path,
        models: Mapping[str, object] | None = None,
        *,
        sleep: SleepFn = asyncio.sleep,
    ) -> AutoPolicy:
        """Build the policy from the config.

        Args:
            workdir: where the agents' work directories go (`<workdir>/agents/...`).
            models: pydantic-ai `Model` objects per role (`strategist`, `analyst`, `review`,
                `implementor`, `summarizer`, or `default`), overriding the config (for tests).
            sleep: the backoff sleep (tests pass one that records instead of waiting).

        Raises:
            ConfigError: no usable model.
        """
        return cls(cfg, problem, workdir, role_models(cfg, problem, models), sleep=sleep)

    async def preflight(self) -> list[str]:
        """Ask every remote model one tiny question (agents.models.preflight)."""
        return await preflight(self.runtime.models, self.runtime.cfg.preflight_timeout_s)

    # -- helpers ----------------------------------------------------------------------------

    def docs(self) -> DocIndex | None:
        """The documentation index (`agents.docs_dir`, else the problem's own: `Domain.documentation`),
        built once; None when nothing is indexed (the Analyst gets no `search_docs` then)."""
        if not self._docs_loaded:
            self._docs_loaded = True
            own = self.domain.documentation(self.problem) if self.cfg.agents.docs_dir is None else {}
            self._docs = DocIndex.for_problem(self.cfg.agents.docs_dir, own)
        return self._docs

    def _brief(self, state: SearchState) -> render.ProblemBrief:
        return render.ProblemBrief.from_state(state, state.integrity)

    def _dir(self, iteration: int, who: str) -> Workdir:
        return Workdir(self.workdir / "agents" / f"iteration-{iteration:03d}" / who)

    def fallback_plan(self, state: SearchState, reason: str) -> Plan:
        """The plan used when the Strategist fails: refine the best design, or innovate, with a
        distinct variant from a fixed menu for each Implementor."""
        best = state.best
        kind = "refine" if best is not None else "innovate"
        rationale, instructions = render.fallback_plan_text(kind, reason, self.problem.domain)
        evidence = (best.id,) if best is not None else ()
        return Plan(strategy=kind, evidence=evidence, rationale=rationale, instructions=instructions,
                    variants=render.fallback_variants(self.cfg.search.implementors, self.problem.domain))

    # -- Policy -----------------------------------------------------------------------------

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        """Curate, plan (one Strategist call), then run K Implementors concurrently."""
        rng = random.Random(f"{self.cfg.search.seed}:{state.iteration}")
        curated = curate(state, self.cfg.context, rng)
        runtime = self.runtime.recording(session.record_call, session.meter)
        brief = self._brief(state)
        if (exhausted := session.budget_left()) is not None:
            return AutoIterationResult(plan=None, note=f"the {exhausted} budget is exhausted",
                                       context_ids=curated.ids_by_group())
        sres = await self._plan(state, curated, brief, runtime, session)
        notes: list[str] = []
        plan = sres.plan
        if plan is None:
            reason = f"{sres.outcome.error_kind}: {sres.error}"
            plan = self.fallback_plan(state, reason)
            notes.append(f"strategist failed ({reason[:200]}); fallback plan: {plan.strategy}")
        results = await self._implement(state, plan, brief, runtime, session)
        ids = tuple(dict.fromkeys(i for r in results for i in r.design_ids))
        notes.extend(f"{r.worker}: {r.reason}" for r in results)
        unusable = self._unusable(sres, results)
        if unusable:
            notes.append(f"the model is unusable ({unusable}); stopping")
        return AutoIterationResult(
            plan=plan, design_ids=ids, note="; ".join(notes), exhausted=unusable is not None,
            context_ids=curated.ids_by_group(), implementors=tuple(results),
            strategist_ok=sres.plan is not None,
        )

    async def _plan(
        self,
        state: SearchState,
        curated: Curated,
        brief: render.ProblemBrief,
        runtime: AgentRuntime,
        session: Session,
    ) -> StrategistResult:
        ask: Callable[[str], Awaitable[str]] | None = None
        if self.cfg.agents.analyst:
            analyst_deps = AnalystDeps(
                workdir=self._dir(state.iteration, "analyst"),
                designs=designs_by_id(state.designs), docs=self.docs(), domain=self.problem.domain,
                probe=session_probe(session, "analyst"), probes=session.probes(),
            )

            async def ask_the_analyst(question: str) -> str:
                session.set_status("analyst", "answering the strategist")
                try:
                    return await ask_analyst(question, analyst_deps, runtime, shown=curated.designs)
                finally:
                    session.set_status("analyst", "idle")

            ask = ask_the_analyst

        deps = StrategistDeps(workdir=self._dir(state.iteration, "strategist"), ask=ask,
                              analyst_docs=ask is not None and has_docs(self.docs()),
                              probe=session_probe(session, "strategist"), probes=session.probes())
        session.set_status("strategist", "planning")
        budget = render.BudgetBrief.of(self.cfg.search, session.budget_remaining(), state.iteration,
                                       patience=self.cfg.search.patience)
        result = await plan_iteration(brief, curated, runtime, deps, designs=state.designs,
                                      iteration=state.iteration, implementors=self.cfg.search.implementors,
                                      budget=budget)
        status = f"plan: {result.plan.strategy}" if result.plan else "failed: fallback plan"
        session.set_status("strategist", status)
        return result

    async def _implement(
        self,
        state: SearchState,
        plan: Plan,
        brief: render.ProblemBrief,
        runtime: AgentRuntime,
        session: Session,
    ) -> list[ImplementorResult]:
        views = designs_by_id(state.designs)
        cited = [views[i] for i in plan.evidence if i in views]
        best = [state.best] if state.best is not None and state.best.id not in plan.evidence else []
        evidence = fit_cited([*cited, *best], state, self.cfg.context)  # the run's best too, in the budget
        start = starting_files(plan, cited, self.domain.main_file(self.problem))
        tasks = [
            ImplementorTask(
                worker=f"implementor-{k}", plan=plan, problem=self.problem, brief=brief,
                evidence=evidence, precheck=self.domain.open(self.problem, self.cfg.evaluation).precheck(state.device),
                workdir=self._dir(state.iteration, f"implementor-{k}").root,
                report_chars=self.cfg.context.failure_report_chars, variant=variant,
                start_files=start, designs=state.designs,
            )
            for k, variant in enumerate(implementor_variants(plan, self.cfg.search.implementors), start=1)
        ]
        # each is told what the others, asked at once, are attempting
        tasks = [replace(t, in_flight=tuple(o.flying() for o in tasks if o is not t)) for t in tasks]
        writers = handoff_session(session, self.cfg, self.problem, state.designs)  # a template is tuned
        return await _all_or_raise([run_implementor(t, writers, runtime) for t in tasks])

    @staticmethod
    def _unusable(sres: StrategistResult, results: Sequence[ImplementorResult]) -> str | None:
        """The fatal error kind when every call of the iteration failed with one."""
        kinds = [sres.outcome.error_kind] if sres.plan is None else [None]
        if any(r.design_ids or r.ok for r in results):
            return None
        kinds += [k for r in results for k in (r.error_kinds or (None,))]
        if kinds and all(k in FATAL for k in kinds):
            return kinds[0]
        return None

    async def review(
        self, design: DesignView, state: SearchState, session: Session
    ) -> Review | None:
        """The Analyst's review of a suspiciously fast design; None without the Analyst."""
        if not self.cfg.agents.analyst:
            return None
        runtime = self.runtime.recording(session.record_call, session.meter)
        deps = AnalystDeps(
            workdir=self._dir(state.iteration, "review"),
            designs=designs_by_id(state.designs), docs=self.docs(), domain=self.problem.domain,
        )
        session.set_status("analyst", f"reviewing {render.short_id(design.id)}")
        try:
            best = next((d for d in state.valid if d.id != design.id), None)
            return await review_design(design, deps, runtime, problem=self._brief(state),
                                       best=best)
        finally:
            session.set_status("analyst", "idle")


def implementor_variants(plan: Plan, implementors: int) -> list[str]:
    """One entry per Implementor to run: the plan's variants (at most `implementors`), or a
    single Implementor with no variant when the plan gives none (K Implementors on one
    identical plan write near-identical designs)."""
    return list(plan.variants[:implementors]) or [""]


async def _all_or_raise(coros: Sequence[Awaitable[ImplementorResult]]) -> list[ImplementorResult]:
    """Run concurrently; if one raises (broken infrastructure), cancel the others and re-raise."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        errors = [e for t in tasks if t.done() and not t.cancelled() and (e := t.exception())]
        if errors:  # every exception is retrieved, the first is raised
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise errors[0]
        return [t.result() for t in tasks]
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
