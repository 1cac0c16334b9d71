"""Owns what both PIKE policies are built from: their models (injected for tests, the offline
`test` models, or the configured model for every role), the agent runtime recording every
call through the Session, the problem brief, the rule that stops a run whose model answers
nothing, the directions earlier phases or batches asked (`asked_before`), and how a step's
slots get their directions (`PikeBase.directions`): ranked by the run's evidence, and, when the
known ones are spent for two or more slots, a fresh brainstorm for new ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from stratagem.agents.agent_command import command_routes
from stratagem.agents.calls import FATAL, AgentRuntime
from stratagem.agents.models import RoleModels, choose_models, preflight, quiet_library
from stratagem.agents.offline import offline_pike_models
from stratagem.agents.pike import PikeAgents, Tickets, parse_ideas
from stratagem.config import StratagemConfig
from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import Direction, ranked_directions
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, SearchState, Session
from stratagem.search.policies.pike_settings import UNBOUNDED_ITERATIONS
from stratagem.search.policies.pike_slots import SlotResult, slot_directions

FRESH_IDEAS_MAX = 10
"""New directions a fresh brainstorm is asked for at most."""

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


@dataclass(frozen=True)
class Directions:
    """A step's directions, one per slot (None: the known ones are spent for it)."""

    chosen: list[Direction | None]
    note: str = ""
    """What a fresh brainstorm did this step ('' when none was asked)."""


def fresh_ideas(saved: object) -> list[str]:
    """The directions fresh brainstorms proposed so far (state `fresh`)."""
    ideas = saved.get("ideas") if isinstance(saved, dict) else None
    return [str(i) for i in ideas] if isinstance(ideas, list) else []


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
        return PikeAgents(self.runtime.recording(session.record_call, session.meter), self.problem, domain=self.problem.domain)

    def brief(self, state: SearchState) -> ProblemBrief:
        return ProblemBrief.from_state(state, state.integrity)

    async def preflight(self) -> list[str]:
        return await preflight(self.runtime.models, self.runtime.cfg.preflight_timeout_s)

    async def directions(self, step: int, seeds: Sequence[str | None], known: Sequence[str],
                         designs: Sequence[DesignView], brief: ProblemBrief, session: Session,
                         used: set[tuple[str | None, str]], *, fresh: bool, per_slot: int) -> Directions:
        """A direction for each of the step's slots (its seed's id; None: the original), from
        `known` (the brainstorm's ideas and the generic directions) and the ideas of earlier
        fresh brainstorms, ranked by the run's evidence (`ranked_directions`), no (seed,
        direction) pair asked twice (`used`, extended). When two or more slots would get none
        (every known direction gained on, tried or contradicted for their seeds) and `fresh`,
        one brainstorm query asks for new directions, told what the run's directions measured,
        if the queries left hold it beside `per_slot` for each slot (its first query and a
        fix); it is asked once per step at most (state `fresh`: a resumed run does not ask again),
        and never twice with the same request (the same evidence)."""
        saved = session.load_state("fresh")
        ideas = fresh_ideas(saved)
        pool, _ = ranked_directions(list(dict.fromkeys([*known, *ideas])), designs)
        chosen = slot_directions(seeds, pool, set(used))
        short = chosen.count(None)
        asked = saved.get("steps", []) if isinstance(saved, dict) else []
        told = prompts.brainstorm(brief, min(short, FRESH_IDEAS_MAX), designs)
        left = session.budget_remaining().queries
        note = ""
        if (fresh and short >= 2 and step not in asked and (left is None or left >= 1 + per_slot * len(seeds))
                and told != (saved.get("last") if isinstance(saved, dict) else None)):  # never the same ask twice
            new, note = await self._fresh_brainstorm(session, told, min(short, FRESH_IDEAS_MAX), [*known, *ideas])
            ideas += new
            session.save_state("fresh", {"ideas": ideas, "steps": [*asked, step], "last": told})
            pool, _ = ranked_directions(list(dict.fromkeys([*known, *ideas])), designs)
        return Directions(slot_directions(seeds, pool, used), note)

    async def _fresh_brainstorm(self, session: Session, prompt: str, n: int,
                                known: Sequence[str]) -> tuple[list[str], str]:
        """Up to `n` new directions from one brainstorm query `prompt` (none the run knows
        already), and the note saying what it gave."""
        session.set_status("brainstorm", "proposing new directions")
        with session.reserve(1) as r:
            answer = await self.agents(session).ask("brainstorm", prompt, Tickets.of(r))
        seen = {k.strip().lower() for k in known}
        new = [i for i in dict.fromkeys(parse_ideas(answer.source or "", n)) if i.strip().lower() not in seen]
        session.set_status("brainstorm", f"{len(new)} new directions")
        why = f" ({answer.error})" if answer.error else ""
        return new, f"fresh brainstorm: {len(new)} new {'direction' if len(new) == 1 else 'directions'}{why}"
