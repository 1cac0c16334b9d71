"""Owns the `pike-o` policy: PIKE-O, the evolutionary search of the PIKE paper (the authors'
OpenEvolve fork, `pike-project/pike-openevolve`), over stratagem's Session.

One loop iteration is one batch of `parallel_evaluations` children, bred at once from programs
that had completed before the batch began. Child c of batch b belongs to island
(b * parallel + c) mod num_islands; its parent is drawn by the island's exploration /
exploitation / random ratios (islands.py), and it is asked for with the crossover prompt (the
current program with its fitness, features and evaluation outcome, the island's top programs
and inspiration programs) or the mutation prompt (the original and the current program only).
A failing child gets up to `max_fix_attempts` Error-Fixing rounds. Valid children join their
island, its grid and the archive; migration runs when an island is due. The database and the
number of finished batches are saved together (one write), and each batch's plan before its
first query, so a killed run resumes inside its batch without asking any query twice.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from stratagem.agents.models import RoleModels
from stratagem.config import StratagemConfig
from stratagem.context import pike as prompts
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, IterationResult, Plan, Review, SearchState, Session
from stratagem.search.policies.handoff import handoff_session
from stratagem.search.policies.islands import ProgramDB
from stratagem.search.policies.pike_models import PikeBase, unanswered
from stratagem.search.policies.pike_settings import PikeOSettings
from stratagem.search.policies.pike_slots import SlotSpec, run_slots


class PikeOPolicy(PikeBase):
    """PIKE-O (see the module docstring)."""

    name = "pike-o"

    def __init__(self, cfg: StratagemConfig, problem: Problem, workdir: Path, models: RoleModels,
                 settings: PikeOSettings) -> None:
        super().__init__(cfg, problem, workdir, models)
        self.s = settings

    def load_db(self, state: SearchState, session: Session) -> tuple[ProgramDB, int]:
        """The program database and the number of finished batches, as last saved."""
        sources = {v.id: v.source for v in state.designs}
        saved = session.load_state("db")
        if isinstance(saved, dict) and isinstance(saved.get("db"), dict):
            return ProgramDB.from_json(saved["db"], self.s, sources), int(saved.get("batches_done", 0))
        return ProgramDB(self.s, size_scale=4 * max(1, len(self.problem.source))), 0

    def _plan(self, batch: int, db: ProgramDB) -> list[dict[str, Any]]:
        s = self.s
        children = []
        for c in range(s.parallel_evaluations):
            island = (batch * s.parallel_evaluations + c) % s.num_islands
            rng = random.Random(f"{self.cfg.search.seed}:pike-o:{batch}:{c}")
            parent = db.sample_parent(island, rng)
            crossover = s.template == "crossover"
            children.append({"child": c, "island": island, "parent": parent,
                             "kind": "crossover" if crossover else "mutate",
                             "top": db.top(island, s.num_top_programs) if crossover else [],
                             "inspirations": db.inspirations(island, parent, rng) if crossover else [],
                             "features": db.features(island, parent)})
        return children

    def _prompt(self, child: dict[str, Any], views: dict[str, DesignView], state: SearchState) -> str:
        brief = self.brief(state)
        parent = views.get(str(child["parent"])) if child.get("parent") else None
        if child["kind"] == "mutate":
            return prompts.mutate(brief, parent)
        top = [views[i] for i in child["top"] if i in views and i != child.get("parent")]
        insp = [views[i] for i in child["inspirations"] if i in views and i not in child["top"]]
        return prompts.crossover(brief, parent, str(child["features"]), top, insp)

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        if (exhausted := session.budget_left()) is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is exhausted")
        db, done = self.load_db(state, session)
        batch = done
        plan = session.load_state(f"batch/{batch}")
        if not isinstance(plan, dict):
            plan = {"children": self._plan(batch, db)}
            session.save_state(f"batch/{batch}", plan)
        views = {v.id: v for v in state.designs}
        specs = [SlotSpec(f"b{batch}/c{ch['child']}", str(ch["kind"]), self._prompt(ch, views, state),
                          (str(ch["parent"]),) if ch.get("parent") else (),
                          {"batch": batch, "island": ch["island"]}) for ch in plan["children"]]
        writers = handoff_session(session, self.cfg, self.problem, state.designs)
        outcome = await run_slots(writers, self.agents(session), self.brief(state), specs,
                                  max_fix=self.s.max_fix_attempts, designs=state.designs)
        results = outcome.results
        added = 0
        for ch, r in zip(plan["children"], results, strict=True):
            fb = session.feedback(r.design_id) if r.design_id else None
            if r.ok and fb is not None and fb.status == "valid" and fb.speedup is not None:
                source = writers.rendered.get(str(r.design_id), r.source)  # a tuned point's, not its template's
                db.add(str(r.design_id), source, float(fb.speedup), int(ch["island"]))
                added += 1
        moves = db.migrate_due()
        session.save_state("db", {"db": db.to_json(), "batches_done": batch + 1})
        sizes = "/".join(str(len(i.members)) for i in db.islands)
        note = (f"batch {batch}: {len(specs)} children, {outcome.text()}; {added} joined the islands; "
                f"islands {sizes}, archive {len(db.archive)}" + (f", {len(moves)} migrated" if moves else ""))
        stop = unanswered(results)
        parents = tuple(dict.fromkeys(p for s in specs for p in s.parents))
        return IterationResult(plan=Plan(strategy=self.s.template, evidence=parents, rationale=f"PIKE-O batch {batch}"),
                               design_ids=tuple(r.design_id for r in results if r.design_id),
                               note=note + (f"; {stop}" if stop else ""), exhausted=bool(stop))

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        return None

