"""Owns what a writer is shown of the whole run, whatever island, branch or plan it works on
(the `evidence` template): the run's best designs with their numbers (the best one's code when
the prompt shows it nowhere else, cut with markers to fit), the attempts made since its starting
design was chosen, why that design was chosen, and the evidence behind the directions a policy
hands out: which gained, which lost (`direction_evidence`, `ranked_directions`).

An attempt is a slot's designs (`slot <key>` tags: a first query and its fix rounds; the best of
them stands for it) or, untagged, one design; a tuned template's other points stand behind its
best point (their table is shown with it, `designs.tuned_lines`). Pure functions over records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratagem.context.curate import truncate_source
from stratagem.context.designs import design_summary
from stratagem.context.templates import fill, short_id
from stratagem.core.search import MEASURED, DesignView, ranked, ratio_text
from stratagem.core.text import clip

BEST_SHOWN = 3
"""The run's best designs listed (one line each) in every writer prompt."""
SINCE_SHOWN = 10
"""At most this many attempts since the starting design, newest first."""
BEST_CODE_CHARS = 6_000
"""The run's best design's code, when shown, is cut (with markers) to this many characters."""
EVEN_BAND = 0.01
"""A child within this fraction of its starting design's ratio neither gained nor lost."""


@dataclass(frozen=True)
class Attempt:
    """One attempt: its first design and the design that stands for it."""

    first: DesignView
    result: DesignView
    key: str | None
    """Its slot (None: an untagged design)."""


def slot_key(view: DesignView) -> tuple[str | None, int]:
    """The design's slot and round (`pike_slots`: `slot <key>` = {round, ...}); (None, 0) without."""
    for k, val in view.tags.items():
        if k.startswith("slot ") and isinstance(val, dict):
            return k.removeprefix("slot "), int(val.get("round", 0) or 0)
    return None, 0


def focus(view: DesignView) -> str | None:
    """What the design's slot was asked to focus on (an idea or a direction), if anything."""
    for k, val in view.tags.items():
        if k.startswith("slot ") and isinstance(val, dict) and val.get("focus"):
            return str(val["focus"])
    return None


def how_made(view: DesignView) -> str:
    """`mutation: reduce the memory traffic`: the design's label and its slot's focus."""
    label = view.strategy or "design"
    f = focus(view)
    return f"{label}: {clip(f, 100)}" if f else label


def _how(first: DesignView, result: DesignView) -> str:
    """How an attempt was made (its first design's label and focus), `then fixed` when a fix
    round's design stands for it."""
    return how_made(first) + (", then fixed" if result.id != first.id and result.strategy == "fix" else "")


def outcome(view: DesignView, domain: str) -> str:
    """A design's result in one line: its numbers, or its status and first failure line."""
    if view.speedup is not None:
        return design_summary(view, domain)
    why = next((line.strip() for line in view.report.splitlines() if line.strip()), "")
    return view.status + (f": {clip(why, 160)}" if why else "")


def attempts(designs: Sequence[DesignView]) -> list[Attempt]:
    """The run's attempts, oldest first: each slot's designs as one (its best measured design, else
    its last, stands for it); a tuned template's points other than the one carrying a slot tag
    are left out (the slot's design shows their table)."""
    by_slot: dict[str, list[DesignView]] = {}
    out: list[Attempt] = []
    for v in sorted(designs, key=lambda v: v.created_at):
        key, _ = slot_key(v)
        if key is None:
            if "handoff" in v.tags:
                continue
            out.append(Attempt(v, v, None))
        else:
            by_slot.setdefault(key, []).append(v)
    for key, views in by_slot.items():
        views.sort(key=lambda v: (slot_key(v)[1], v.created_at))
        best = ranked(views)
        out.append(Attempt(views[0], best[0] if best else views[-1], key))
    return sorted(out, key=lambda a: a.first.created_at)


def run_so_far(designs: Sequence[DesignView], start: DesignView | None, domain: str, *,
               shown: Sequence[str] = (), skip: Sequence[str] = (), why: str = "") -> str:
    """The block every writer prompt carries: why its starting design `start` was chosen (`why`,
    when the policy says), the run's best designs, the best one's code unless `shown` (the ids
    whose code the prompt already has), and the newest attempts made since `start` was (in its
    iteration or later: those asked beside it too; None: the original, so every attempt) other
    than those in `skip` (listed elsewhere in the prompt)."""
    best = ranked(designs)[:BEST_SHOWN]
    tried = attempts(designs)
    first = {a.result.id: a.first for a in tried}
    lines = [fill("evidence", "line", domain=None, short_id=short_id(v.id), how=_how(first.get(v.id, v), v),
                  outcome=outcome(v, domain)) for v in best]
    code = ""
    if best and best[0].id not in shown:
        sources = {v.id: v.source for v in designs}
        top = best[0]
        parents = [sources[p] for p in top.parents if p in sources]
        code = "\n\n" + fill("evidence", "best_code", domain=None, short_id=short_id(top.id),
                             source=truncate_source(top.source.strip(), BEST_CODE_CHARS, parents))
    parent = ""
    if why:
        not_best = fill("evidence", "not_best", domain=None) if start is not None and best and best[0].id != start.id else ""
        parent = fill("evidence", "parent", domain=None, why=why, not_best=not_best and " " + not_best) + "\n\n"
    hidden = {*skip, *shown, *(v.id for v in best), *([start.id] if start is not None else [])}
    recent = [a for a in tried if _since(a.first, start) and a.result.id not in hidden
              and a.first.id not in hidden][::-1][:SINCE_SHOWN]
    since = ""
    if recent:
        since = "\n\n" + fill("evidence", "since", domain=None, attempts="\n".join(
            fill("evidence", "line", domain=None, short_id=short_id(a.result.id), how=_how(a.first, a.result),
                 outcome=outcome(a.result, domain)) for a in recent))
    return fill("evidence", "run_so_far", domain=None, parent=parent,
                best="\n".join(lines) or fill("evidence", "nothing_measured", domain=None), best_code=code,
                since=since)


def _since(view: DesignView, start: DesignView | None) -> bool:
    """Whether `view` was made since `start` (None: the original, so always): in `start`'s
    iteration or a later one (the attempts asked beside it included), else after it."""
    if start is None:
        return True
    if view.iteration is not None and start.iteration is not None:
        return view.iteration >= start.iteration
    return view.created_at > start.created_at


@dataclass(frozen=True)
class Case:
    """One attempt that took a direction: its result's ratio against its starting design's."""

    design_id: str
    ratio: float | None
    """The result's paired ratio (None: it failed)."""
    start_ratio: float
    """The starting design's (the original's: 1.0)."""
    start_id: str | None = None
    """The starting design (None: the original)."""

    @property
    def change(self) -> float | None:
        return self.ratio / self.start_ratio if self.ratio is not None and self.start_ratio > 0 else None

    def text(self) -> str:
        got = f"{ratio_text(self.ratio)}x" if self.ratio is not None else "failed"
        start = f"`{short_id(self.start_id)}`" if self.start_id is not None else "the original"
        return f"`{short_id(self.design_id)}` {got} from {start}'s {ratio_text(self.start_ratio)}x"


@dataclass(frozen=True)
class Evidence:
    """What the run's measurements say of one direction."""

    gains: tuple[Case, ...] = ()
    losses: tuple[Case, ...] = ()
    even: tuple[Case, ...] = ()

    @property
    def contradicted(self) -> bool:
        """It lost and never gained."""
        return bool(self.losses) and not self.gains

    def best_gain(self) -> float:
        return max((c.change or 0.0 for c in self.gains), default=0.0)


def direction_evidence(designs: Sequence[DesignView]) -> dict[str, Evidence]:
    """Each direction (a slot's `focus`) the run's attempts took, and how they did against the
    designs they started from: a gain beyond `EVEN_BAND`, a loss (slower, or failed after its
    fixes), or even. An attempt still without a verdict counts for nothing."""
    by_id = {v.id: v for v in designs}
    found: dict[str, dict[str, list[Case]]] = {}
    for a in attempts(designs):
        f = focus(a.first)
        if f is None or a.result.status not in (*MEASURED, "invalid", "error"):
            continue
        start = by_id.get(a.first.parents[0]) if a.first.parents else None
        start_ratio = (start.speedup if start is not None else None) or 1.0
        ratio = a.result.speedup if a.result.status in MEASURED else None
        case = Case(a.result.id, ratio, start_ratio, start.id if start is not None else None)
        change = case.change
        kind = ("losses" if change is None or change < 1 - EVEN_BAND else
                "gains" if change > 1 + EVEN_BAND else "even")
        found.setdefault(f, {"gains": [], "losses": [], "even": []})[kind].append(case)
    return {f: Evidence(tuple(c["gains"]), tuple(c["losses"]), tuple(c["even"])) for f, c in found.items()}


@dataclass(frozen=True)
class Direction:
    text: str
    why: str
    """Why it is handed out, in the prompt's words."""


def ranked_directions(pool: Sequence[str], designs: Sequence[DesignView]) -> tuple[list[Direction], str]:
    """The directions to hand out, best first, and the contradicted ones in words ('' when none):
    those that gained (the largest gain first), then `pool`'s untried ones in its order (a
    brainstorm's ideas before the generic directions, as the policy orders them), then those
    tried without a clear result. A direction that lost and never gained is never handed out."""
    ev = direction_evidence(designs)

    def cases(xs: Sequence[Case]) -> str:
        return ", ".join(c.text() for c in xs[-3:])

    gained = sorted((f for f, e in ev.items() if e.gains), key=lambda f: -ev[f].best_gain())
    out = [Direction(f, fill("evidence", "why_gained", domain=None, cases=cases(ev[f].gains))) for f in gained]
    out += [Direction(f, fill("evidence", "why_untried", domain=None)) for f in dict.fromkeys(pool) if f not in ev]
    out += [Direction(f, fill("evidence", "why_even", domain=None, cases=cases(e.even)))
            for f, e in ev.items() if not e.gains and not e.contradicted]
    lost = [f"\"{clip(f, 100)}\" ({cases(e.losses)})" for f, e in ev.items() if e.contradicted]
    return out, "; ".join(lost)
