"""Owns what both PIKE policies are built from: their models (injected for tests, the offline
`test` models, or the configured model for every role), the agent runtime recording every
call through the Session, the problem brief, the rule that stops a run whose model answers
nothing, and the directions earlier phases or batches asked (`asked_before`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from stratagem.agents.agent_command import command_routes
from stratagem.agents.calls import FATAL, AgentRuntime
from stratagem.agents.models import RoleModels, choose_models, preflight, quiet_library
from stratagem.agents.offline import offline_pike_models
from stratagem.agents.pike import PikeAgents
from stratagem.config import StratagemConfig
from stratagem.context.render import ProblemBrief
from stratagem.core.problem import Problem
from stratagem.core.search import SearchState, Session
from stratagem.search.policies.pike_settings import UNBOUNDED_ITERATIONS
from stratagem.search.policies.pike_slots import SlotResult

S = TypeVar("S")
"""A PIKE policy's settings (`PikeBSettings`, `PikeOSettings`)."""


def pike_models(cfg: StratagemConfig, problem: Problem, injected: Mapping[str, object] | None = None) -> RoleModels:
    """Injected models per role (`brainstorm`, `optimize`, `fix`, `mutate`, `crossover`, or
    `default`), the offline `test` models, or the configured model for every role.

    Raises:
        ConfigError: no model configured and none injected.
    """
    return choose_models(cfg.agents, lambda: offline_pike_models(problem), injected)


def unanswered(results: Sequence[SlotResult]) -> str:
    """Why the run must stop, when no query of a phase was answered ('' otherwise): the model
    is unusable (a fatal error) or answers nothing, and another phase would ask again for free."""
    asked = [r for r in results if r.queries > 0]
    if not asked or any(r.answered for r in asked):
        return ""
    kinds = sorted({k for r in asked for k in r.error_kinds})
    if kinds == ["budget"]:
        return ""
    fatal = [k for k in kinds if k in FATAL]
    why = f"the model is unusable ({fatal[0]})" if fatal else f"no query was answered ({', '.join(kinds) or 'no answer'})"
    return f"{why}; stopping"


def asked_before(session: Session, n: int, key: str, items: str, *focus: str) -> set[tuple[str | None, str]]:
    """The (parent, focus) pairs of the phases or batches before the `n`th, from their saved
    plans (state `KEY/<i>`, its list `items`): an item's focus is the first of `focus` it sets."""
    used: set[tuple[str | None, str]] = set()
    for i in range(n):
        plan = session.load_state(f"{key}/{i}")
        for it in plan.get(items, ()) if isinstance(plan, dict) else ():
            if f := next((it[k] for k in focus if it.get(k)), None):
                used.add((it.get("parent"), str(f)))
    return used


class PikeBase(Generic[S]):
    """The parts of a PIKE policy that do not depend on its search (`s`: its settings)."""

    name = "pike"
    unbounded_iterations = UNBOUNDED_ITERATIONS
    """An iteration limit this high is no limit: the budgets end the run (the live view shows
    no iteration count)."""

    def __init__(self, cfg: StratagemConfig, problem: Problem, workdir: Path, models: RoleModels,
                 settings: S) -> None:
        quiet_library()
        self.s = settings
        self.cfg = cfg
        self.problem = problem
        self.workdir = Path(workdir)
        self.runtime = AgentRuntime(cfg=cfg.agents, models=models, writers=command_routes(cfg, self.workdir))

    def step_limit(self) -> int | None:
        """The run's phase (batch) limit as a prompt states it: None when the iterations are
        unbounded (the budgets end the run; no "batch 3 of 100000")."""
        n = self.cfg.search.iterations
        return None if n >= self.unbounded_iterations else n

    def agents(self, session: Session) -> PikeAgents:
        return PikeAgents(self.runtime.recording(session.record_call), self.problem, domain=self.problem.domain)

    def brief(self, state: SearchState) -> ProblemBrief:
        return ProblemBrief.from_state(state, state.integrity)

    async def preflight(self) -> list[str]:
        return await preflight(self.runtime.models, self.runtime.cfg.preflight_timeout_s)
