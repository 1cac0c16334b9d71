"""Owns what a writer is shown of the whole run, whatever island, branch or plan it works on
(the `evidence` template): the run's best designs with their numbers (the best one's code when
the prompt shows it nowhere else, cut with markers to fit), the attempts made since its starting
design was chosen, the attempts asked beside it and not yet measured (`InFlight`), why that
design was chosen, and the evidence behind the directions a policy hands out: which gained,
which lost (`direction_evidence`, `ranked_directions`), and what to ask when every known
direction is spent (`spent_text`).

An attempt is a slot's designs (`slot <key>` tags: a first query and its fix rounds; the best of
them stands for it) or, untagged, one design; a tuned template's other points stand behind its
best point (their table is shown with it, `designs.tuned_lines`). Pure functions over records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
IN_FLIGHT_SHOWN = 12
"""At most this many lines of attempts in flight (one per direction or idea)."""
COMPACT_SINCE_SHOWN = 5
"""Attempts since the starting design in a compact block (an Error-Fixing prompt's)."""


@dataclass(frozen=True)
class InFlight:
    """An attempt asked beside a prompt's own (the same batch, phase or iteration) and not yet
    measured when the prompt was written."""

    who: str
    """`b3/c1`, `p2/s0`, `implementor-2`."""
    how: str
    """How it is made: `initial`, `mutation`, `crossover`, a plan's strategy."""
    start: str | None
    """The design it builds on (None: the original program, or nothing)."""
    what: str
    """Its direction, idea or variant ('' when it was given none: an open prompt)."""


def in_flight_text(flying: Sequence[InFlight]) -> str:
    """The attempts in flight beside a prompt's own, one line per direction (the attempts taking
    it listed with what they build on), at most `IN_FLIGHT_SHOWN` lines; '' when none."""
    by_what: dict[str, list[InFlight]] = {}
    for f in flying:
        by_what.setdefault(f.what.strip(), []).append(f)
    lines = []
    for what, fs in list(by_what.items())[:IN_FLIGHT_SHOWN]:
        who = ", ".join(f"{f.who} ({f.how}" + (f" of `{short_id(f.start)}`" if f.start else "") + ")" for f in fs)
        lines.append(fill("evidence", "in_flight_line", domain=None, who=who,
                          what=clip(what, 160) if what else fill("evidence", "open_prompt", domain=None)))
    if len(by_what) > IN_FLIGHT_SHOWN:
        lines.append(f"- and {len(by_what) - IN_FLIGHT_SHOWN} more")
    return fill("evidence", "in_flight", domain=None, attempts="\n".join(lines)) if lines else ""


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
               shown: Sequence[str] = (), skip: Sequence[str] = (), why: str = "",
               in_flight: Sequence[InFlight] = (), compact: bool = False) -> str:
    """The block every writer prompt carries: why its starting design `start` was chosen (`why`,
    when the policy says), the run's best designs, the best one's code unless `shown` (the ids
    whose code the prompt already has) or `compact`, the newest attempts made since `start` was
    (in its iteration or later: those asked beside it too; None: the original, so every attempt)
    other than those in `skip` (listed elsewhere in the prompt), and the attempts `in_flight`
    beside this one. `compact` (an Error-Fixing prompt's, which carries two programs already):
    no code and fewer attempts. Only the attempts in flight when nothing is stored yet."""
    if not designs and not why:
        text = in_flight_text(in_flight)
        return fill("evidence", "run_so_far_empty", domain=None, in_flight=text) if text else ""
    best = ranked(designs)[:BEST_SHOWN]
    tried = attempts(designs)
    first = {a.result.id: a.first for a in tried}
    lines = [fill("evidence", "line", domain=None, short_id=short_id(v.id), how=_how(first.get(v.id, v), v),
                  outcome=outcome(v, domain)) for v in best]
    code = ""
    if best and best[0].id not in shown and not compact:
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
              and a.first.id not in hidden][::-1][:COMPACT_SINCE_SHOWN if compact else SINCE_SHOWN]
    since = ""
    if recent:
        since = "\n\n" + fill("evidence", "since", domain=None, attempts="\n".join(
            fill("evidence", "line", domain=None, short_id=short_id(a.result.id), how=_how(a.first, a.result),
                 outcome=outcome(a.result, domain)) for a in recent))
    flying = in_flight_text(in_flight)
    return fill("evidence", "run_so_far", domain=None, parent=parent,
                best="\n".join(lines) or fill("evidence", "nothing_measured", domain=None), best_code=code,
                since=since, in_flight="\n\n" + flying if flying else "")


def _since(view: DesignView, start: DesignView | None) -> bool:
    """Whether `view` was made since `start` (None: the original, so always): in `start`'s
    iteration or a later one (the attempts asked beside it included), else after it."""
    if start is None:
        return True
    if view.iteration is not None and start.iteration is not None:
        return view.iteration >= start.iteration
    return view.created_at > start.created_at


def news(designs: Sequence[DesignView], known: Sequence[str], author: str, domain: str) -> str:
    """The results a conversation's later turn is told (an Implementor's feedback): the designs
    other writers had measured since it began (those not in `known`, by anyone but `author`),
    best first, at most `COMPACT_SINCE_SHOWN`; '' when none."""
    seen = set(known)
    new = [v for v in designs if v.id not in seen and v.author != author]
    if not new:
        return ""
    best = ranked(new)
    rest = [v for v in reversed(new) if v not in best]
    lines = [fill("evidence", "line", domain=None, short_id=short_id(v.id), how=how_made(v), outcome=outcome(v, domain))
             for v in [*best, *rest][:COMPACT_SINCE_SHOWN]]
    return fill("evidence", "news", domain=None, attempts="\n".join(lines))


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
    step: int = 0
    """The iteration (phase, batch) the attempt was asked in."""

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

    def latest(self) -> tuple[Case, ...]:
        """Its attempts of the latest step it was tried in."""
        every = (*self.gains, *self.losses, *self.even)
        last = max((c.step for c in every), default=0)
        return tuple(c for c in every if c.step == last)

    @property
    def contradicted(self) -> bool:
        """The numbers say it loses now: its attempts of the latest step it was tried in lost
        (at least one) and none gained, whatever it gained before (a direction that gained on a
        plain design and lost on the designs that took it already is spent)."""
        latest = self.latest()
        return any(c in self.losses for c in latest) and not any(c in self.gains for c in latest)

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
        case = Case(a.result.id, ratio, start_ratio, start.id if start is not None else None,
                    a.first.iteration if a.first.iteration is not None else 0)
        change = case.change
        kind = ("losses" if change is None or change < 1 - EVEN_BAND else
                "gains" if change > 1 + EVEN_BAND else "even")
        found.setdefault(f, {"gains": [], "losses": [], "even": []})[kind].append(case)
    return {f: Evidence(tuple(c["gains"]), tuple(c["losses"]), tuple(c["even"])) for f, c in found.items()}


Standing = Literal["gained", "untried", "even"]


@dataclass(frozen=True)
class Direction:
    text: str
    why: str
    """Why it is handed out, in the prompt's words."""
    standing: Standing = "untried"
    """What the run's numbers say of it: it gained (and did not lose since), it was not tried,
    or it was tried without a clear gain (handing it out again recycles it)."""


def ranked_directions(pool: Sequence[str], designs: Sequence[DesignView]) -> tuple[list[Direction], str]:
    """The directions to hand out, best first, and the contradicted ones in words ('' when none):
    those that gained (the largest gain first), then `pool`'s untried ones in its order (a
    brainstorm's ideas before the generic directions, as the policy orders them), then those
    tried without a clear result. A direction whose latest attempts lost is never handed out
    (`Evidence.contradicted`), whatever it gained before."""
    ev = direction_evidence(designs)

    def cases(xs: Sequence[Case]) -> str:
        return ", ".join(c.text() for c in xs[-3:])

    live = {f: e for f, e in ev.items() if not e.contradicted}
    gained = sorted((f for f, e in live.items() if e.gains), key=lambda f: -live[f].best_gain())
    out = [Direction(f, fill("evidence", "why_gained", domain=None, cases=cases(ev[f].gains)), "gained")
           for f in gained]
    out += [Direction(f, fill("evidence", "why_untried", domain=None)) for f in dict.fromkeys(pool) if f not in ev]
    out += [Direction(f, fill("evidence", "why_even", domain=None, cases=cases(e.even)), "even")
            for f, e in live.items() if not e.gains]
    lost = []
    for f, e in ev.items():
        if e.contradicted:
            before = (" " + fill("evidence", "gained_before", domain=None, cases=cases(e.gains))
                      if e.gains else "")
            lost.append(f"\"{clip(f, 100)}\" ({cases(e.losses)}{before})")
    return out, "; ".join(lost)


def evidence_lines(designs: Sequence[DesignView]) -> list[str]:
    """Each direction the run's attempts took, with what they measured: lost (its latest
    attempts), gained, or no clear gain or loss; three cases at most each."""
    lines = []
    for f, e in direction_evidence(designs).items():
        said, cases = (("lost", e.losses) if e.contradicted else ("gained", e.gains) if e.gains
                       else ("no clear gain or loss", e.even))
        lines.append(f"- \"{clip(f, 100)}\": {said} ({', '.join(c.text() for c in cases[-3:])})")
    return lines


def spent_text(designs: Sequence[DesignView]) -> str:
    """What a writer is asked when no direction the run knows is left for it (every one gained
    on or tried on its starting design, tried without a clear gain, or contradicted): to
    brainstorm a new one itself, told what the known ones measured."""
    return fill("evidence", "spent", domain=None, known="\n".join(evidence_lines(designs)) or "(none measured yet)")


def fresh_brainstorm_text(designs: Sequence[DesignView]) -> str:
    """What a fresh brainstorm (asked when the known directions are spent) is told of the
    directions the run took: each with what its attempts measured."""
    return fill("evidence", "fresh_brainstorm", domain=None,
                known="\n".join(evidence_lines(designs)) or "(none measured yet)")
