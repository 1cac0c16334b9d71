"""Owns what PIKE-B and PIKE-O share: a *slot* (one query of a phase or batch, and the
Error-Fixing Agent's rounds on its candidate), run on the shared fix loop, and how a slot's
progress is found again after a killed run.

Every design a slot evaluates is tagged `slot <key>` = {round, ...}: round 0 is the slot's first
query (optimize, mutate or crossover), rounds 1.. its fixes. The tag key names the slot, so a
design that two slots wrote alike keeps both tags. On resume a slot continues from what is
stored: a slot whose last design passed is done; one that used its rounds is done; otherwise
the Error-Fixing Agent resumes from its last design's stored feedback, with the rounds left.
So no query is asked twice and no design is lost (docs/pike.md, "Resume").

A slot's prompts are written when they are asked, from the run as it is then (`Session.views`):
its first query when the slot starts, each fix when it is asked. Each shows the slots of its
phase or batch that have not ended as in flight (`run_view.InFlight`: what they build on and
the direction they take), and the designs its siblings finished before it as results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratagem.agents.fix_loop import ACCEPTED, Attempt, FixLimits, Written, fix_until_valid
from stratagem.agents.pike import PikeAgents, Tickets
from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import Direction, InFlight
from stratagem.core.search import DesignView, Feedback, Session


def slot_tag(key: str) -> str:
    return f"slot {key}"


def made_by(role: str, parents: Sequence[str], fresh: bool = True) -> str:
    """A design's label (its stored strategy): how it was made. `initial` (a first query with no
    program to start from), `mutation` (one program rewritten), `crossover` (a program with
    others shown), `fix` (an Error-Fixing round); a tuned point is labelled by the hand-off
    (`tune.TUNED_POINT`)."""
    if not fresh:
        return "fix"
    if not parents:
        return "initial"
    return "crossover" if role == "crossover" else "mutation"


Ask = Callable[[Sequence[DesignView], Sequence[InFlight]], str]
"""(the run's designs when the slot starts, the attempts in flight beside it) -> its first query."""


@dataclass(frozen=True)
class SlotSpec:
    """One query and its fixes."""

    key: str
    """`p3/s7` (PIKE-B phase 3, slot 7), `b12/c0` (PIKE-O batch 12, child 0)."""
    role: str
    """The first query's role: `optimize`, `mutate` or `crossover`."""
    prompt: Ask
    """Writes the first query when the slot starts."""
    parents: tuple[str, ...] = ()
    tags: Mapping[str, Any] = field(default_factory=dict)
    """Stored in the slot's tag beside the round (branch, island, ...); its `focus` (the idea or
    direction it takes) is what its siblings are told it attempts."""

    def in_flight(self) -> InFlight:
        """How the slot's siblings see it while it runs."""
        return InFlight(self.key, made_by(self.role, self.parents), self.parents[0] if self.parents else None,
                        str(self.tags.get("focus") or ""))


Now = Callable[[], tuple[Sequence[DesignView], Sequence[InFlight]]]
"""The run's designs at this moment and the attempts in flight beside a slot."""


@dataclass(frozen=True)
class SlotResult:
    key: str
    design_id: str | None
    """The slot's last design (None: no design, e.g. the budget ran out before its query)."""
    ok: bool
    queries: int
    """Queries this invocation sent for the slot (a resumed slot counts only its new ones; a
    query the budget refused before it was sent is not one)."""
    fixes: int
    """Fix rounds the slot used in all (stored ones included)."""
    reason: str
    error_kinds: tuple[str, ...] = ()
    """The failed queries' error kinds (`auth`, `timeout`, `budget`, ...)."""
    answered: bool = True
    """False when no query of this invocation got an answer (a resumed, finished slot: True)."""
    source: str = ""
    """The last design's source."""
    restated: int = 0
    """Answers of the slot that only restated a design evaluated before (each went back to the
    model, with the slot's query, as a fix round would)."""

    @property
    def writer_failed(self) -> bool:
        """A query was sent and brought no answer (a transport error, a refusal, a limit)."""
        return any(k != "budget" for k in self.error_kinds)

    @property
    def not_asked(self) -> bool:
        """No query was sent for the slot and it has no design: a budget left it nothing."""
        return self.queries == 0 and self.design_id is None and not self.ok


@dataclass(frozen=True)
class PhaseOutcome:
    """What running a phase's (or batch's) slots did."""

    results: list[SlotResult]
    queries: int
    """Queries the phase was charged (every request sent, transport retries included)."""
    granted: int
    """Queries its reservation held."""

    def counts(self) -> dict[str, int]:
        """What the notes say: queries, first queries and fixes sent, valid designs (distinct;
        those that only restated an earlier one apart), writer failures, slots the budget left
        unasked."""
        r = self.results
        valid = {x.design_id for x in r if x.ok and x.design_id}
        return {"queries": self.queries, "slots": len(r), "valid": len(valid),
                "restated": sum(x.restated for x in r), "writer_failures": sum(x.writer_failed for x in r),
                "not_asked": sum(x.not_asked for x in r), "fixes": sum(x.fixes for x in r)}

    def text(self) -> str:
        """`10 queries (6 first, 4 fixes): 3 valid designs, 1 restating an earlier design, ...`."""
        c = self.counts()
        parts = [f"{c['queries']} {'query' if c['queries'] == 1 else 'queries'}",
                 f"{c['valid']} valid {'design' if c['valid'] == 1 else 'designs'}"]
        if c["restated"]:
            parts.append(f"{c['restated']} {'answer' if c['restated'] == 1 else 'answers'} restating an earlier "
                         "design (sent back to the model)")
        parts.append(f"{c['fixes']} fix {'round' if c['fixes'] == 1 else 'rounds'}")
        parts.append(f"{c['writer_failures']} writer {'failure' if c['writer_failures'] == 1 else 'failures'}")
        if c["not_asked"]:
            parts.append(f"{c['not_asked']} of {c['slots']} slots not asked (no budget left)")
        return ", ".join(parts)


def slot_history(designs: Sequence[DesignView], key: str) -> list[DesignView]:
    """The stored designs of slot `key`, by round."""
    tag = slot_tag(key)
    found = [(int(v.tags[tag].get("round", 0)), v) for v in designs
             if isinstance(v.tags.get(tag), Mapping)]
    return [v for _, v in sorted(found, key=lambda rv: (rv[0], rv[1].created_at))]


def _ended_before(spec: SlotSpec, history: Sequence[DesignView], max_fix: int) -> SlotResult | None:
    """The slot's result when its stored designs already end it (accepted, or out of fix rounds)."""
    if history and history[-1].status in ACCEPTED:
        return SlotResult(spec.key, history[-1].id, True, 0, len(history) - 1, "done before the resume",
                          source=history[-1].source)
    if len(history) >= 1 + max_fix:
        return SlotResult(spec.key, history[-1].id, False, 0, len(history) - 1, "fix rounds used before the resume",
                          source=history[-1].source)
    return None


async def run_slot(
    session: Session, agents: PikeAgents, brief: ProblemBrief, spec: SlotSpec, *, max_fix: int,
    tickets: Tickets, now: Now, history: Sequence[DesignView] = (), worker: str | None = None, start: str = "",
) -> SlotResult:
    """Ask the slot's query and fix its candidate up to `max_fix` rounds (continuing from
    `history`, the slot's stored designs); every query takes one of the phase's `tickets` and
    is written from the run as `now()` says it is. `start` is the design the first query builds
    on (its parent's source; a coding agent finds it in its work directory)."""
    worker = worker or spec.key
    if (ended := _ended_before(spec, history, max_fix)) is not None:
        return ended
    first_round = len(history)
    last_source = history[-1].source if history else ""

    def fix_prompt(fb: Feedback) -> str:
        designs, flying = now()
        parent = next((v for v in designs if spec.parents and v.id == spec.parents[0]), None)
        return prompts.fix(brief, last_source, fb, designs, parent, flying)

    if history:
        fb = session.feedback(history[-1].id)
        if fb is None:  # stored but never evaluated: the loop's recovery evaluates it first
            fb = Feedback(history[-1].id, history[-1].status, history[-1].report)
        prompt = fix_prompt(fb)
    else:
        prompt = spec.prompt(*now())
    own = prompt
    """The slot's own query as this invocation first asked it (a restatement is sent it again)."""
    asked = 0
    turns = 0
    twins: list[str] = []
    """The earlier designs this slot's answers restated, in order."""
    retries: set[int] = set()
    """Turns (from 0) that ask the slot's own query again after a restatement."""

    async def write(text: str, _tokens_left: int | None) -> Written:
        nonlocal last_source, asked, turns
        role = spec.role if first_round + turns == 0 or turns in retries else "fix"
        turns += 1
        w = await agents.write(role, text, tickets, worker=worker, current=last_source or start)
        if w.error_kind != "budget":
            asked += 1
        if w.source is not None:
            last_source = w.source
        return w

    def next_prompt(fb: Feedback, _attempts: int) -> str:
        if fb.duplicate_of is not None:
            # A restatement goes back to the model with the slot's own query, never silently.
            twins.append(fb.duplicate_of)
            retries.add(turns)
            session.set_status(worker, f"restated {fb.duplicate_of[:10]}: asked again")
            return prompts.restated(own, twins, brief.domain)
        return fix_prompt(fb)

    def describe(attempt: int, previous: str | None) -> Attempt:
        r = first_round + attempt - 1
        before = previous or (history[-1].id if history else None)
        fresh = r == 0 or attempt - 1 in retries
        parents = spec.parents if fresh else ((before,) if before else spec.parents)
        return Attempt(made_by(spec.role, spec.parents, fresh), parents,
                       {slot_tag(spec.key): {"round": r, **spec.tags}})

    res = await fix_until_valid(
        session, worker, prompt=prompt, write=write, next_prompt=next_prompt,
        limits=FixLimits(1 + max_fix - first_round), strategy=made_by(spec.role, spec.parents), parents=spec.parents,
        describe=describe, accept_restated=False,
    )
    last = res.design_ids[-1] if res.design_ids else (history[-1].id if history else None)
    fixes = max(0, first_round + res.attempts - 1)
    answered = res.attempts > 0 or asked == 0
    return SlotResult(spec.key, last, res.ok, asked, fixes, res.reason, res.error_kinds, answered, last_source,
                      len(twins))


def slot_directions(seeds: Sequence[str | None], pool: Sequence[Direction],
                    used: set[tuple[str | None, str]]) -> list[Direction | None]:
    """A direction for each slot of one step (its seed's id, None: the original program): the
    first direction of `pool` (ranked by the run's evidence: `run_view.ranked_directions`) that
    gained or is untried, that no other slot of the step takes (parallel attempts do not
    re-derive one idea) and that the seed was never asked with (`used` holds the (seed,
    direction) pairs earlier steps asked, and is extended with these). None once none is left:
    the known directions are spent for that slot (a direction tried without a clear gain is
    not recycled either), or with no pool."""
    out: list[Direction | None] = []
    taken: set[str] = set()
    for seed in seeds:
        fresh = next((d for d in pool if d.standing != "even" and d.text not in taken
                      and (seed, d.text) not in used), None)
        if fresh is not None:
            used.add((seed, fresh.text))
            taken.add(fresh.text)
        out.append(fresh)
    return out


class TicketPool:
    """A phase's reserved queries, handed to its slots in turn: a slot starts once the pool
    can give it its whole allowance (its first query and every fix round it may need), so a
    failing candidate is never left without its fixes because other slots' first queries took
    them; unused tickets come back when a slot ends. When nothing runs and less than a whole
    allowance is left, the next slot gets what there is (the run's last queries)."""

    def __init__(self, granted: int) -> None:
        self.free = granted
        self.running = 0
        self.turn = 0
        self.cond = asyncio.Condition()

    async def claim(self, position: int, need: int) -> Tickets:
        async with self.cond:
            await self.cond.wait_for(lambda: self.turn == position and (
                self.free >= need or self.running == 0))
            got = min(need, self.free)
            self.free -= got
            self.turn += 1
            if got:
                self.running += 1
            self.cond.notify_all()
            return Tickets(got)

    async def release(self, tickets: Tickets) -> None:
        async with self.cond:
            if tickets.granted:
                self.running -= 1
            self.free += tickets.left
            self.cond.notify_all()


async def run_slots(
    session: Session, agents: PikeAgents, brief: ProblemBrief, specs: Sequence[SlotSpec], *,
    max_fix: int, designs: Sequence[DesignView], worker_prefix: str = "",
) -> PhaseOutcome:
    """Run the slots under one reservation of (1 + max_fix) queries per slot, started in the
    order given: at once while the reservation covers each slot's whole allowance, then as
    earlier slots end and return what they did not use (`TicketPool`). The phase never takes
    the run past its query budget, however its queries interleave, and a failing candidate
    keeps the fix rounds the docs promise (docs/pike.md)."""
    todo = [(s, slot_history(designs, s.key)) for s in specs]
    by_id = {v.id: v for v in designs}
    starts = [by_id[s.parents[0]].source if s.parents and s.parents[0] in by_id else "" for s in specs]
    needs = [0 if (h and h[-1].status in ACCEPTED) else max(0, 1 + max_fix - len(h)) for s, h in todo]
    ended = {s.key for (s, _), n in zip(todo, needs, strict=True) if n == 0}

    def now_for(key: str) -> Now:
        return lambda: (session.views(), [s.in_flight() for s in specs if s.key != key and s.key not in ended])

    with session.reserve(sum(needs)) as r:
        pool = TicketPool(r.granted)
        order = [i for i, n in enumerate(needs) if n > 0]
        position = {i: k for k, i in enumerate(order)}

        async def one(i: int) -> SlotResult:
            s, h = todo[i]
            if needs[i] == 0:
                return await run_slot(session, agents, brief, s, max_fix=max_fix, tickets=Tickets(0),
                                      now=now_for(s.key), history=h, worker=f"{worker_prefix}{s.key}",
                                      start=starts[i])
            tickets = await pool.claim(position[i], needs[i])
            try:
                if not tickets.granted:
                    return SlotResult(s.key, h[-1].id if h else None, False, 0, max(0, len(h) - 1),
                                      "not asked: the phase's queries were used", ("budget",), True,
                                      h[-1].source if h else "")
                return await run_slot(session, agents, brief, s, max_fix=max_fix, tickets=tickets,
                                      now=now_for(s.key), history=h, worker=f"{worker_prefix}{s.key}",
                                      start=starts[i])
            finally:
                ended.add(s.key)
                await pool.release(tickets)

        try:
            async with asyncio.TaskGroup() as tg:  # broken infrastructure in one cancels the others
                tasks = [tg.create_task(one(i)) for i in range(len(todo))]
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0] from None
        return PhaseOutcome([t.result() for t in tasks], r.used, r.granted)
