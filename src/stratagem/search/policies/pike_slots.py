"""Owns what PIKE-B and PIKE-O share: a *slot* (one query of a phase or batch, and the
Error-Fixing Agent's rounds on its candidate), run on the shared fix loop, and how a slot's
progress is found again after a killed run.

Every design a slot evaluates is tagged `slot <key>` = {round, ...}: round 0 is the slot's first
query (optimize, mutate or crossover), rounds 1.. its fixes. The tag key names the slot, so a
design that two slots wrote alike keeps both tags. On resume a slot continues from what is
stored: a slot whose last design passed is done; one that used its rounds is done; otherwise
the Error-Fixing Agent resumes from its last design's stored feedback, with the rounds left.
So no query is asked twice and no design is lost (docs/pike.md, "Resume").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratagem.agents.fix_loop import ACCEPTED, Attempt, FixLimits, Written, fix_until_valid
from stratagem.agents.pike import PikeAgents, Tickets
from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.core.search import DesignView, Feedback, Session


def slot_tag(key: str) -> str:
    return f"slot {key}"


@dataclass(frozen=True)
class SlotSpec:
    """One query and its fixes."""

    key: str
    """`p3/s7` (PIKE-B phase 3, slot 7), `b12/c0` (PIKE-O batch 12, child 0)."""
    role: str
    """The first query's role: `optimize`, `mutate` or `crossover`."""
    prompt: str
    parents: tuple[str, ...] = ()
    tags: Mapping[str, Any] = field(default_factory=dict)
    """Stored in the slot's tag beside the round (branch, island, ...)."""


@dataclass(frozen=True)
class SlotResult:
    key: str
    design_id: str | None
    """The slot's last design (None: no design, e.g. the budget ran out before its query)."""
    ok: bool
    queries: int
    """Queries this invocation asked for the slot (a resumed slot counts only its new ones)."""
    fixes: int
    """Fix rounds the slot used in all (stored ones included)."""
    reason: str
    error_kinds: tuple[str, ...] = ()
    """The failed queries' error kinds (`auth`, `timeout`, `budget`, ...)."""
    answered: bool = True
    """False when no query of this invocation got an answer (a resumed, finished slot: True)."""
    source: str = ""
    """The last design's source."""


def slot_history(designs: Sequence[DesignView], key: str) -> list[DesignView]:
    """The stored designs of slot `key`, by round."""
    tag = slot_tag(key)
    found = [(int(v.tags[tag].get("round", 0)), v) for v in designs
             if isinstance(v.tags.get(tag), Mapping)]
    return [v for _, v in sorted(found, key=lambda rv: (rv[0], rv[1].created_at))]


async def run_slot(
    session: Session, agents: PikeAgents, brief: ProblemBrief, spec: SlotSpec, *, max_fix: int,
    tickets: Tickets, history: Sequence[DesignView] = (), worker: str | None = None,
) -> SlotResult:
    """Ask the slot's query and fix its candidate up to `max_fix` rounds (continuing from
    `history`, the slot's stored designs); every query takes one of the phase's `tickets`."""
    worker = worker or spec.key
    if history and history[-1].status in ACCEPTED:
        return SlotResult(spec.key, history[-1].id, True, 0, len(history) - 1, "done before the resume",
                          source=history[-1].source)
    if len(history) >= 1 + max_fix:
        return SlotResult(spec.key, history[-1].id, False, 0, len(history) - 1, "fix rounds used before the resume",
                          source=history[-1].source)
    first_round = len(history)
    last_source = history[-1].source if history else ""
    prompt = spec.prompt
    if history:
        fb = session.feedback(history[-1].id)
        if fb is None:  # stored but never evaluated: the loop's recovery evaluates it first
            fb = Feedback(history[-1].id, history[-1].status, history[-1].report)
        prompt = prompts.fix(brief, last_source, fb)
    asked = 0

    async def write(text: str, _tokens_left: int | None) -> Written:
        nonlocal last_source, asked
        role = spec.role if first_round + asked == 0 else "fix"
        asked += 1
        w = await agents.write(role, text, tickets)
        if w.source is not None:
            last_source = w.source
        return w

    def next_prompt(fb: Feedback, _attempts: int) -> str:
        return prompts.fix(brief, last_source, fb)

    def describe(attempt: int, previous: str | None) -> Attempt:
        r = first_round + attempt - 1
        before = previous or (history[-1].id if history else None)
        parents = spec.parents if r == 0 else ((before,) if before else spec.parents)
        return Attempt(spec.role if r == 0 else "fix", parents, {slot_tag(spec.key): {"round": r, **spec.tags}})

    res = await fix_until_valid(
        session, worker, prompt=prompt, write=write, next_prompt=next_prompt,
        limits=FixLimits(1 + max_fix - first_round), strategy=spec.role, parents=spec.parents,
        describe=describe,
    )
    last = res.design_ids[-1] if res.design_ids else (history[-1].id if history else None)
    fixes = max(0, first_round + res.attempts - 1)
    answered = res.attempts > 0 or asked == 0
    return SlotResult(spec.key, last, res.ok, asked, fixes, res.reason, res.error_kinds, answered, last_source)


async def run_slots(
    session: Session, agents: PikeAgents, brief: ProblemBrief, specs: Sequence[SlotSpec], *,
    max_fix: int, designs: Sequence[DesignView], worker_prefix: str = "",
) -> list[SlotResult]:
    """Run every slot at once under one reservation of (1 + max_fix) queries per slot: the
    phase never takes the run past its query budget, however its queries interleave."""
    todo = [(s, slot_history(designs, s.key)) for s in specs]
    need = sum(max(0, 1 + max_fix - len(h)) for s, h in todo
               if not (h and h[-1].status in ACCEPTED))
    with session.reserve(need) as r:
        tickets = Tickets.of(r)
        try:
            async with asyncio.TaskGroup() as tg:  # broken infrastructure in one cancels the others
                tasks = [tg.create_task(run_slot(session, agents, brief, s, max_fix=max_fix, tickets=tickets,
                                                 history=h, worker=f"{worker_prefix}{s.key}")) for s, h in todo]
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0] from None
        return [t.result() for t in tasks]
