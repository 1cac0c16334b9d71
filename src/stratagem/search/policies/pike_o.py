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
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import ranked_directions, spent_text
from stratagem.core.search import DesignView, IterationResult, Plan, Review, SearchState, Session
from stratagem.search.policies.handoff import handoff_session
from stratagem.search.policies.islands import ProgramDB
from stratagem.search.policies.pike_models import PikeBase, asked_before, fresh_ideas, unanswered
from stratagem.search.policies.pike_settings import PikeOSettings
from stratagem.search.policies.pike_slots import Ask, SlotSpec, made_by, run_slots


class PikeOPolicy(PikeBase[PikeOSettings]):
    """PIKE-O (see the module docstring)."""

    name = "pike-o"

    def load_db(self, state: SearchState, session: Session) -> tuple[ProgramDB, int]:
        """The program database and the number of finished batches, as last saved."""
        sources = {v.id: v.source for v in state.designs}
        saved = session.load_state("db")
        if isinstance(saved, dict) and isinstance(saved.get("db"), dict):
            return ProgramDB.from_json(saved["db"], self.s, sources), int(saved.get("batches_done", 0))
        return ProgramDB(self.s, size_scale=4 * max(1, len(self.problem.source))), 0

    def batch_size(self, session: Session) -> tuple[int, str]:
        """Children in the next batch: `parallel_evaluations`, or as many as the queries left can
        ask with all their fix rounds, with a note saying so; at least two while two queries are
        left, so one writer failure does not leave a batch unanswered (which stops the run)."""
        n = self.s.parallel_evaluations
        left = session.budget_remaining().queries
        fit = max(min(2, left), left // (1 + self.s.max_fix_attempts), 1) if left is not None else n
        if fit >= n:
            return n, ""
        return fit, (f"{fit} of {n} children (parallel_evaluations): {left} queries left fit {fit} "
                     f"with their {self.s.max_fix_attempts} fix rounds each")

    def _plan(self, batch: int, db: ProgramDB, n: int) -> list[dict[str, Any]]:
        """`n` children: each its island's parent (the original program only while the database
        is empty) and how it was drawn, the top programs (the run's best first, then the island's
        own, the whole population's while the island has none) and inspirations (the other
        islands' elites when the island has none) for a crossover (`iterate` gives each its
        direction). A child is a crossover when it has a parent and other programs to show, else
        a mutation."""
        s = self.s
        children = []
        for c in range(n):
            island = (batch * s.parallel_evaluations + c) % s.num_islands
            rng = random.Random(f"{self.cfg.search.seed}:pike-o:{batch}:{c}")
            parent, how = db.draw_parent(island, rng)
            top, insp = [], []
            if s.template == "crossover" and parent is not None:
                # The run's best first (whatever the island), then the island's own top programs.
                own = [i for i in db.top(island, s.num_top_programs + 1) if i != parent]
                own = own or [i for i in db.archive if i != parent]
                top = [i for i in dict.fromkeys([*db.archive[:1], *own]) if i != parent][: s.num_top_programs]
                insp = [i for i in db.inspirations(island, parent, rng) if i not in top]
                if not insp:  # an island with nothing else: the other islands' elites
                    insp = [i for i in db.archive if i != parent and i not in top][: s.num_inspirations]
            children.append({"child": c, "island": island, "parent": parent, "parent_why": how,
                             "kind": "crossover" if top or insp else "mutate", "top": top, "inspirations": insp,
                             "features": db.features(island, parent)})
        return children

    @staticmethod
    def _ask(child: Mapping[str, Any], views: Mapping[str, DesignView], brief: ProblemBrief,
             steer: prompts.Steer) -> Ask:
        """A child's first query, written when it starts: its parent, why it was drawn, its
        direction with the evidence for it (`steer`), the whole run's best and newest results as
        they are then, and its siblings in flight."""
        parent = views.get(str(child["parent"])) if child.get("parent") else None
        direction = child.get("direction")
        why = str(child.get("parent_why") or "") if parent is not None else ""
        if child["kind"] == "mutate":
            return lambda designs, flying: prompts.mutate(brief, parent, direction, designs, why=why, steer=steer,
                                                          in_flight=flying)
        top = [views[i] for i in child["top"] if i in views]
        insp = [views[i] for i in child["inspirations"] if i in views]
        return lambda designs, flying: prompts.crossover(
            brief, parent, str(child["features"]), top, insp, direction=direction, designs=designs, why=why,
            steer=steer, in_flight=flying)

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        if (exhausted := session.budget_left()) is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is exhausted")
        db, done = self.load_db(state, session)
        batch = done
        plan = session.load_state(f"batch/{batch}")
        generic = prompts.directions(self.brief(state))
        if not isinstance(plan, dict):
            n, capped = self.batch_size(session)
            children = self._plan(batch, db, n)
            d = await self.directions(batch, [ch["parent"] for ch in children], generic, state.designs,
                                      self.brief(state), session, asked_before(session, batch, "batch", "children",
                                                                              "direction"),
                                      fresh=True, per_slot=min(2, 1 + self.s.max_fix_attempts))
            for ch, c in zip(children, d.chosen, strict=True):
                ch.update(direction=c.text if c else None, direction_why=c.why if c else "", spent=c is None)
            plan = {"children": children, "note": "; ".join(x for x in (capped, d.note) if x)}
            session.save_state(f"batch/{batch}", plan)
        pool, lost = ranked_directions(list(dict.fromkeys([*generic, *fresh_ideas(session.load_state("fresh"))])),
                                       state.designs)
        spent = spent_text(state.designs)
        brief = replace(self.brief(state), budget=prompts.budget(
            self.cfg.search, session.budget_remaining(), batch + 1, "batch", len(plan["children"]),
            self.s.max_fix_attempts, state.problem.domain, steps=self.step_limit()))
        views = {v.id: v for v in state.designs}
        # A crossover's parents: the current program, then the programs it was shown.
        specs = [SlotSpec(f"b{batch}/c{ch['child']}", str(ch["kind"]),
                          self._ask(ch, views, brief, prompts.Steer(str(ch.get("direction_why") or ""), lost,
                                                                    spent if ch.get("spent") else "")),
                          tuple(dict.fromkeys(str(i) for i in [ch.get("parent"), *ch.get("top", ()),
                                                               *ch.get("inspirations", ())] if i)),
                          {"batch": batch, "island": ch["island"], "focus": ch.get("direction")})
                 for ch in plan["children"]]
        writers = handoff_session(session, self.cfg, self.problem, state.designs)
        outcome = await run_slots(writers, self.agents(session), brief, specs,
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
        capped = f" ({plan['note']})" if plan.get("note") else ""
        note = (f"batch {batch}: {len(specs)} children{capped}, {outcome.text()}; {added} joined the islands; "
                f"islands {sizes}, archive {len(db.archive)}" + (f", {len(moves)} migrated" if moves else ""))
        stop = unanswered(results)
        parents = tuple(dict.fromkeys(p for s in specs for p in s.parents))
        made = Counter(made_by(s.role, s.parents) for s in specs)
        strategy = ", ".join(f"{n} {label}" for label, n in sorted(made.items(), key=lambda x: (-x[1], x[0])))
        return IterationResult(plan=Plan(strategy=strategy or "none", evidence=parents,
                                         rationale=f"PIKE-O batch {batch}"),
                               design_ids=tuple(r.design_id for r in results if r.design_id),
                               note=note + (f"; {stop}" if stop else ""), exhausted=bool(stop))

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        return None

