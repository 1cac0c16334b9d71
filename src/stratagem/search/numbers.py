"""Owns the numbers every view of a run shows, each defined once: how designs are counted, and
how a ratio is written with its interval.

The live view, `show`, `show --json`, the run's last lines, the export header (and
`best/`), the HTML report and its plots all read these, so they cannot disagree. Status words,
one meaning each: **unstable** = valid, its timing did not settle, not ranked; **busy** = valid,
not measured (the machine was busy), not ranked; **unreviewed** = valid, its review pending,
not ranked.

Counting:

- A design is **valid** when the harness passed and timed it (`core.search.MEASURED`). Two
  flags may sit on a valid design: **unstable** (its timing did not settle after its
  re-timings) and **unreviewed** (the review a very fast design needs failed). A flagged
  design is still valid; it is **ranked** (on the leaderboard, eligible as the best) only
  when neither flag is raised.
- A design **did not pass** otherwise: invalid, error, needs_gpu, or judged cheating by a
  review (`flagged`).

Ratios: a design's ratios over every baseline, and the run's headline, are `search/headline.py`'s
(each with its interval, confirmed where the round timed it, never a design against itself).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stratagem.core.search import PASSED, DesignView, ranked
from stratagem.domains.base import BaselineNames
from stratagem.store.records import keyed

UNSTABLE = "unstable"
UNREVIEWED = "unreviewed"
BUSY = "busy"


def passed(v: DesignView) -> bool:
    """Valid: the harness passed the design (whatever its flags; a `busy` one was not timed)."""
    return v.status in PASSED


def did_not_pass(v: DesignView) -> bool:
    """The harness (or a review that found cheating) rejected the design."""
    return not passed(v)


def is_ranked(v: DesignView) -> bool:
    """On the leaderboard: valid with no flag (the filter of `core.search.ranked`)."""
    return bool(ranked([v]))


def not_ranked_because(v: DesignView) -> str:
    """Why a valid design is not ranked ('' when it is ranked, or not valid)."""
    if v.status == UNSTABLE:
        return f"timing unstable: {v.stability}" if v.stability else "timing unstable"
    if v.status == BUSY:
        return v.stability or "not measured: the machine was busy"
    if v.status == UNREVIEWED:
        return "awaiting review (the review of a very fast design failed; it is retried)"
    return ""


@dataclass(frozen=True)
class Counts:
    """How many designs a run has, by the one definition above."""

    designs: int
    """Every evaluated design."""
    valid: int
    """Passed by the harness: `ranked + unstable + unreviewed + busy`."""
    ranked: int
    """Valid with no flag: on the leaderboard."""
    unstable: int
    """Valid, timing unstable (not ranked)."""
    unreviewed: int
    """Valid, review pending (not ranked)."""
    busy: int
    """Valid, not measured: the machine was busy (not ranked)."""
    failed: int
    """Did not pass: `designs - valid`."""

    def text(self) -> str:
        """`4 designs: 3 valid (1 with unstable timing, not ranked), 1 did not pass`: the one
        sentence every view prints."""
        flags = [f"{n} {what}" for n, what in ((self.unstable, "with unstable timing"),
                                                (self.unreviewed, "awaiting review"),
                                                (self.busy, "not measured (the machine was busy)")) if n]
        flagged = f" ({', '.join(flags)}, not ranked)" if flags else ""
        noun = "design" if self.designs == 1 else "designs"
        return f"{self.designs} {noun}: {self.valid} valid{flagged}, {self.failed} did not pass"

    def to_json(self) -> dict[str, int]:
        return {"designs": self.designs, "valid": self.valid, "ranked": self.ranked, "unstable": self.unstable,
                "unreviewed": self.unreviewed, "busy": self.busy, "failed": self.failed}


def counts(views: Sequence[DesignView]) -> Counts:
    """The counts of `views` (every evaluated design of a run, or of one iteration)."""
    valid = [v for v in views if passed(v)]
    return Counts(designs=len(views), valid=len(valid), ranked=len(ranked(views)),
                  unstable=sum(v.status == UNSTABLE for v in valid),
                  unreviewed=sum(v.status == UNREVIEWED for v in valid),
                  busy=sum(v.status == BUSY for v in valid),
                  failed=len(views) - len(valid))


def times_text(times_ms: Mapping[str, float | None], names: BaselineNames) -> str:
    """`baselines: REFERENCE 1.2345 ms, COMPARED 0.9876 ms` (a domain that names its reference in
    prose: `baseline: the reference 17.7069 ms`); '' when none was timed."""
    shown = [(names.reference if k == names.key else k, v) for k, v in keyed(times_ms, names.key).items() if v]
    if not shown:
        return ""
    return f"baseline{'s' if len(shown) > 1 else ''}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in shown)


def rank_marks(ranks: Sequence[int | None]) -> list[str]:
    """The `#` column of every table of ranked designs, from their ranks in table order:
    `=k` where several designs share rank k (tied: never ranked apart), `k` otherwise, `-` for
    a design without one."""
    shared = Counter(r for r in ranks if r is not None)
    return ["-" if r is None else (f"={r}" if shared[r] > 1 else str(r)) for r in ranks]


def board_marks(board: Sequence[DesignView]) -> list[str]:
    """`rank_marks` of a leaderboard (`ranked` designs in order): a design the confirmation
    round ranked keeps the round's rank (its ties too, as the round's table shows them); the
    designs after them count on from the round's last rank."""
    ranks: list[int | None] = []
    last = 0
    for v in board:
        r = v.confirmed.rank if v.confirmed is not None else None
        last = r if r is not None else last + 1
        ranks.append(last)
    return rank_marks(ranks)
