"""Owns the `pike-b` policy: PIKE-B, the exploit-heavy branching search of the PIKE paper
(`pike-project/pike:scripts/parallel_tree_search.py`), over stratagem's Session.

One loop iteration is one phase. Before phase 0 the Initial Brainstorming Agent proposes up
to `num_branches` ideas (resized to exactly that many); phase 0 asks one optimization query per
idea, each the start of a branch. Every later phase takes the previous phase's valid solutions
(the best of each branch first, then the rest, fastest first, with the original program last as
a fallback), draws `top_k` seeds and splits `queries_per_phase` improvement queries over them
(`np.array_split`: 10 over 4 is 3/3/2/2); each asks for a full rewrite. Every failing candidate
gets up to `max_fix_attempts` Error-Fixing rounds inside its phase. Every query (brainstorm,
optimize, fix) is charged to the run's query budget; a phase reserves what it may use, so the
budget is never exceeded. A phase's plan is saved before its first query, so a killed run
resumes inside the phase without asking any query twice (pike_slots.py).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from stratagem.agents.models import RoleModels
from stratagem.agents.pike import Tickets, parse_ideas
from stratagem.config import StratagemConfig
from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.core.problem import Problem
from stratagem.core.search import (
    DesignView,
    IterationResult,
    Plan,
    Review,
    SearchState,
    Session,
    ranked,
)
from stratagem.search.policies.pike_models import PikeBase, unanswered
from stratagem.search.policies.pike_settings import PikeBSettings
from stratagem.search.policies.pike_slots import SlotSpec, run_slots

GENERIC_IDEA = "optimize the whole architecture for speed on this device"


def split_counts(n: int, k: int) -> list[int]:
    """`n` queries over `k` seeds as `np.array_split` does: the first ones get one more."""
    if k <= 0:
        return []
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def library(designs: Sequence[DesignView], phase: int, scope: str) -> list[DesignView]:
    """The seeds' pool for the phase after `phase`: its valid solutions (or every valid one,
    `scope="all"`), the best of each branch first (fastest first), then the rest. A design two
    phases wrote alike belongs to both."""
    valid = ranked(designs)
    if scope == "phase":
        valid = [v for v in valid if _branch_in(v, phase) is not None]
    best_by_branch: dict[object, DesignView] = {}
    for v in valid:  # ranked: the first of a branch is its best
        best_by_branch.setdefault(_branch_in(v, phase if scope == "phase" else None), v)
    firsts = list(best_by_branch.values())
    rest = [v for v in valid if v not in firsts]
    return firsts + rest


def _branch_in(v: DesignView, phase: int | None) -> object:
    """The design's branch in `phase` (None: in its first phase); None when it has no slot there."""
    for k, val in v.tags.items():
        if k.startswith("slot p") and isinstance(val, dict) and (phase is None or val.get("phase") == phase):
            return (val.get("phase"), val.get("branch"))
    return None


def select_seeds(lib: Sequence[DesignView | None], n: int, s: PikeBSettings,
                 rng: random.Random) -> list[tuple[int, DesignView | None]]:
    """(rank in the library, seed) for each of `n` queries; None is the original program."""
    if not lib:
        lib = [None]
    top = list(enumerate(lib[: s.top_k]))
    if s.selector == "top-k":
        return [pair for pair, c in zip(top, split_counts(n, len(top)), strict=True) for _ in range(c)]
    everyone = list(enumerate(lib))
    if s.selector == "elite-diverse":
        elites = round(n * s.elite_fraction)
        return [top[i % len(top)] for i in range(elites)] + [rng.choice(everyone) for _ in range(n - elites)]
    if s.selector == "tournament":
        return [min(rng.sample(everyone, min(s.tournament_size, len(everyone))), key=lambda p: p[0])
                for _ in range(n)]
    weights = [(v.speedup or 0.0) if v is not None else 1e-9 for _, v in everyone]  # roulette: 1/runtime
    return rng.choices(everyone, weights=weights, k=n)


class PikeBPolicy(PikeBase):
    """PIKE-B (see the module docstring)."""

    name = "pike-b"

    def __init__(self, cfg: StratagemConfig, problem: Problem, workdir: Path, models: RoleModels,
                 settings: PikeBSettings) -> None:
        super().__init__(cfg, problem, workdir, models)
        self.s = settings

    async def _ideas(self, brief: ProblemBrief, session: Session) -> tuple[list[str], str]:
        saved = session.load_state("ideas")
        if isinstance(saved, dict) and isinstance(saved.get("ideas"), list):
            return [str(i) for i in saved["ideas"]], ""
        n = self.s.num_branches
        note = ""
        if not self.s.brainstorm:
            ideas, note = [GENERIC_IDEA] * n, "no brainstorm (brainstorm = false)"
        else:
            session.set_status("brainstorm", "proposing ideas")
            with session.reserve(1) as r:
                answer = await self.agents(session).ask("brainstorm", prompts.brainstorm(brief, n), Tickets.of(r))
            ideas = parse_ideas(answer.text or "", n)
            if not ideas:
                why = answer.error or "no bullet list in the answer"
                note = f"brainstorm gave no ideas ({why[:160]}); phase 0 uses a generic task"
                ideas = [GENERIC_IDEA] * n
            session.set_status("brainstorm", f"{len(set(ideas))} ideas")
        session.save_state("ideas", {"ideas": ideas, "note": note})
        return ideas, note

    def _plan_phase(self, phase: int, state: SearchState, ideas: Sequence[str]) -> list[dict[str, object]]:
        if phase == 0:
            return [{"slot": i, "branch": i, "idea": idea, "parent": None} for i, idea in enumerate(ideas)]
        lib = library(state.designs, phase - 1, self.s.library)
        rng = random.Random(f"{self.cfg.search.seed}:pike-b:{phase}")
        seeds = select_seeds([*lib, None], self.s.queries_per_phase, self.s, rng)
        return [{"slot": i, "branch": rank, "idea": None, "parent": seed.id if seed is not None else None}
                for i, (rank, seed) in enumerate(seeds)]

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        if (exhausted := session.budget_left()) is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is exhausted")
        brief = self.brief(state)
        ideas, note = await self._ideas(brief, session)
        cur = session.load_state("current")
        phase = int(cur["phase"]) if isinstance(cur, dict) else 0
        plan = session.load_state(f"phase/{phase}")
        if isinstance(plan, dict) and plan.get("done"):
            phase, plan = phase + 1, None
        if not isinstance(plan, dict):
            plan = {"slots": self._plan_phase(phase, state, ideas), "done": False}
            session.save_state(f"phase/{phase}", plan)
            session.save_state("current", {"phase": phase})
        views = {v.id: v for v in state.designs}
        specs = []
        for slot in plan["slots"]:
            key = f"p{phase}/s{slot['slot']}"
            parent = views.get(str(slot["parent"])) if slot.get("parent") else None
            prompt = (prompts.optimize(brief, str(slot["idea"])) if phase == 0
                      else prompts.improve(brief, parent))
            specs.append(SlotSpec(key, "optimize", prompt, (parent.id,) if parent else (),
                                  {"phase": phase, "branch": slot["branch"]}))
        results = await run_slots(session, self.agents(session), brief, specs, max_fix=self.s.max_fix_attempts,
                                  designs=state.designs)
        # One pass closes the phase, even one a budget or a failing model cut short (only a
        # killed run leaves a phase open, and the resumed run finishes it).
        session.save_state(f"phase/{phase}", {**plan, "done": True})
        ok = sum(r.ok for r in results)
        fixes = sum(r.fixes for r in results)
        parents = tuple(dict.fromkeys(p for s in specs for p in s.parents))
        ids = tuple(dict.fromkeys(i for r in results if r.design_id for i in [r.design_id]))
        notes = [note] if note else []
        notes.append(f"phase {phase}: {len(specs)} queries, {ok} valid, {fixes} fix rounds")
        strategy = "phase-0 ideas" if phase == 0 else f"improve top {min(self.s.top_k, len(parents) or 1)}"
        more = [f"{r.key}: {r.reason}" for r in results if not r.ok][:4]
        stop = unanswered(results)
        if stop:
            notes.append(stop)
        return IterationResult(plan=Plan(strategy=strategy, evidence=parents, rationale=f"PIKE-B phase {phase}"),
                               design_ids=ids, note="; ".join(notes + more), exhausted=bool(stop))

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        return None

