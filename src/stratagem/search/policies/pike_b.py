"""Owns the `pike-b` policy: PIKE-B, the exploit-heavy branching search of the PIKE paper
(`pike-project/pike:scripts/parallel_tree_search.py`), over stratagem's Session.

One loop iteration is one phase. Before phase 0 the Initial Brainstorming Agent proposes up
to `num_branches` ideas; phase 0 asks one optimization query per task (the distinct ideas, then
generic directions when the ideas are fewer than the branches), each the start of a branch.
Every later phase takes the previous phase's valid solutions (the best of each branch first,
then the rest, fastest first, with the original program last as a fallback), draws `top_k`
seeds and splits `queries_per_phase` improvement queries over them (`np.array_split`: 10 over
4 is 3/3/2/2); each asks for a full rewrite, and the slots of a phase each get a distinct
direction (new ones from a fresh brainstorm when the known ones are spent). Slots start one
per seed first, so a short budget still reaches every seed. Every
failing candidate gets up to `max_fix_attempts` Error-Fixing rounds inside its phase. Every
query (brainstorm, optimize, fix) is charged to the run's query budget; a phase reserves what
it may use and a slot starts only when its whole allowance (1 + fixes) is free, so the budget
is never exceeded and no failing candidate loses its fixes to other slots' first queries. A
phase's plan is saved before its first query, so a killed run resumes inside the phase without
asking any query twice (pike_slots.py).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from stratagem.agents.pike import Tickets, parse_ideas
from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import Direction, InFlight, ranked_directions, spent_text
from stratagem.core.search import (
    DesignView,
    IterationResult,
    Plan,
    Review,
    SearchState,
    Session,
    ranked,
)
from stratagem.core.text import clip
from stratagem.search.policies.handoff import handoff_session
from stratagem.search.policies.pike_models import PikeBase, asked_before, fresh_ideas, unanswered
from stratagem.search.policies.pike_settings import PikeBSettings
from stratagem.search.policies.pike_slots import Ask, SlotSpec, run_slots

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


def seed_reason(rank: int, library_size: int, selector: str) -> str:
    """Why a phase's seed was drawn, in words: its rank among the previous phase's valid
    solutions (the best of each branch first) and the selector that drew it."""
    if rank >= library_size:
        return "it is the original program, the fallback when no solution of the previous phase is left"
    return (f"it ranks {rank + 1} of {library_size} among the previous phase's valid solutions (each branch's "
            f"best first), drawn by the `{selector}` selector")


def phase0_tasks(ideas: Sequence[str], n: int, generic: Sequence[str] | None) -> list[str]:
    """Phase 0's `n` tasks: the brainstorm's distinct ideas, then (`generic` given: distinct
    directions on) the generic directions it did not name, then the list again; without
    `generic`, the ideas repeated (the authors' `resize_list`)."""
    distinct = list(dict.fromkeys(i for i in ideas if i.strip()))
    if generic is not None:
        distinct += [g for g in generic if g not in distinct]
    if not distinct or n <= 0:
        return []
    return [distinct[i % len(distinct)] for i in range(n)]


def start_order(seeds: Sequence[tuple[int, object]]) -> list[int]:
    """Slot indexes in the order they start: one slot of each seed in rank order, then a second
    of each, and so on, so a budget that runs out mid-phase still reaches every seed (the
    original program too)."""
    seen: Counter[int] = Counter()
    keyed = []
    for i, (rank, _) in enumerate(seeds):
        keyed.append((seen[rank], i))
        seen[rank] += 1
    return [i for _, i in sorted(keyed)]


class PikeBPolicy(PikeBase[PikeBSettings]):
    """PIKE-B (see the module docstring)."""

    name = "pike-b"

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
                asked = r.used
            ideas = parse_ideas(answer.source or "", n)
            if not ideas:
                why = answer.error or "no bullet list in the answer"
                note = (f"brainstorm: {asked} {'query' if asked == 1 else 'queries'}, no ideas ({clip(why, 160)}); "
                        "phase 0 uses " + ("the generic directions" if self.s.distinct_directions else "a generic task"))
                ideas = [GENERIC_IDEA] * n
            else:
                k = len(set(ideas))
                note = f"brainstorm: {asked} {'query' if asked == 1 else 'queries'}, {k} distinct {'idea' if k == 1 else 'ideas'}"
            session.set_status("brainstorm", f"{len(set(ideas))} ideas")
        session.save_state("ideas", {"ideas": ideas, "note": note})
        return ideas, note

    async def _plan_phase(self, phase: int, state: SearchState, ideas: Sequence[str],
                          brief: ProblemBrief, session: Session) -> tuple[list[dict[str, object]], str]:
        """The phase's slots (and a note on a fresh brainstorm, '' when none was asked)."""
        generic = prompts.directions(brief) if self.s.distinct_directions else None
        brainstormed = [i for i in ideas if i != GENERIC_IDEA]
        if phase == 0:
            if not brainstormed and not self.s.brainstorm:  # the "no IBA" ablation: one generic task
                tasks = [GENERIC_IDEA] * self.s.num_branches
            else:
                tasks = phase0_tasks(brainstormed, self.s.num_branches, generic) or [GENERIC_IDEA] * self.s.num_branches
            return [{"slot": i, "branch": i, "idea": task, "parent": None} for i, task in enumerate(tasks)], ""
        lib = library(state.designs, phase - 1, self.s.library)
        rng = random.Random(f"{self.cfg.search.seed}:pike-b:{phase}")
        seeds = select_seeds([*lib, None], self.s.queries_per_phase, self.s, rng)
        ids = [seed.id if seed is not None else None for _, seed in seeds]
        if generic is None:  # the paper's open prompt
            chosen: list[Direction | None] = [None] * len(seeds)
            note = ""
        else:  # the directions the evidence favours, the untried ones, new ones when they are spent
            d = await self.directions(phase, ids, [*brainstormed, *generic], state.designs, brief, session,
                                      asked_before(session, phase, "phase", "slots", "direction", "idea"),
                                      fresh=self.s.brainstorm, per_slot=min(2, 1 + self.s.max_fix_attempts))
            chosen, note = d.chosen, d.note
        return [{"slot": i, "branch": rank, "idea": None, "parent": seed.id if seed is not None else None,
                 "direction": c.text if c else None, "direction_why": c.why if c else "",
                 "spent": c is None and generic is not None,
                 "parent_why": seed_reason(rank, len(lib), self.s.selector)}
                for i, ((rank, seed), c) in enumerate(zip(seeds, chosen, strict=True))], note

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
            slots, fresh = await self._plan_phase(phase, state, ideas, brief, session)
            plan = {"slots": slots, "done": False, "note": fresh}
            session.save_state(f"phase/{phase}", plan)
            session.save_state("current", {"phase": phase})
        views = {v.id: v for v in state.designs}
        slots = plan["slots"]
        brainstormed = [i for i in ideas if i != GENERIC_IDEA]
        known = [*brainstormed, *prompts.directions(brief), *fresh_ideas(session.load_state("fresh"))]
        pool, lost = ranked_directions(list(dict.fromkeys(known)), state.designs)
        spent = spent_text(state.designs)
        brief = replace(brief, budget=prompts.budget(self.cfg.search, session.budget_remaining(), phase + 1, "phase",
                                                     len(slots), self.s.max_fix_attempts, brief.domain,
                                                     steps=self.step_limit()))
        order = start_order([(int(sl["branch"]), sl.get("parent")) for sl in slots]) if phase else range(len(slots))
        specs = []
        for slot in (slots[i] for i in order):
            key = f"p{phase}/s{slot['slot']}"
            parent = views.get(str(slot["parent"])) if slot.get("parent") else None
            focus = str(slot["idea"]) if phase == 0 else slot.get("direction")
            steer = prompts.Steer(str(slot.get("direction_why") or ""), lost, spent if slot.get("spent") else "")
            specs.append(SlotSpec(key, "optimize", self._ask(brief, phase, slot, parent, steer, state.designs),
                                  (parent.id,) if parent else (),
                                  {"phase": phase, "branch": slot["branch"], "focus": focus}))
        outcome = await run_slots(handoff_session(session, self.cfg, self.problem, state.designs),
                                  self.agents(session), brief, specs, max_fix=self.s.max_fix_attempts,
                                  designs=state.designs)
        results = outcome.results
        # One pass closes the phase, even one a budget or a failing model cut short (only a
        # killed run leaves a phase open, and the resumed run finishes it).
        session.save_state(f"phase/{phase}", {**plan, "done": True})
        parents = tuple(dict.fromkeys(p for s in specs for p in s.parents))
        ids = tuple(dict.fromkeys(i for r in results if r.design_id for i in [r.design_id]))
        notes = [n for n in (note, str(plan.get("note") or "")) if n]
        notes.append(f"phase {phase}: {outcome.text()}")
        seeds = len({sl.get("parent") for sl in slots})
        strategy = "initial: phase-0 ideas" if phase == 0 else f"mutation: improve top {seeds}"
        more = [f"{r.key}: {clip(r.reason, 120)}" for r in results if not r.ok and not r.not_asked][:4]
        stop = unanswered(results)
        if stop:
            notes.append(stop)
        return IterationResult(plan=Plan(strategy=strategy, evidence=parents, rationale=f"PIKE-B phase {phase}"),
                               design_ids=ids, note="; ".join(notes + more), exhausted=bool(stop))

    def _ask(self, brief: ProblemBrief, phase: int, slot: Mapping[str, object], parent: DesignView | None,
             steer: prompts.Steer, before: Sequence[DesignView]) -> Ask:
        """The slot's first query, written when it starts: phase 0's idea, else an improvement
        of its seed in its direction, with the run as it is then and its siblings in flight.
        With `distinct_directions = false` (the paper's identical prompts) the run as it was
        when the phase began (`before`) and no siblings: one prompt per seed."""
        def run(designs: Sequence[DesignView], flying: Sequence[InFlight]) -> tuple[Sequence[DesignView],
                                                                                       Sequence[InFlight]]:
            return (designs, flying) if self.s.distinct_directions else (before, ())

        if phase == 0:
            return lambda designs, flying: prompts.optimize(brief, str(slot["idea"]), *run(designs, flying))
        direction = str(slot["direction"]) if slot.get("direction") else None
        why = str(slot.get("parent_why") or "") if parent else ""

        def improve(designs: Sequence[DesignView], flying: Sequence[InFlight]) -> str:
            now, siblings = run(designs, flying)
            return prompts.improve(brief, parent, direction, now, why=why, steer=steer, in_flight=siblings)

        return improve

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        return None
