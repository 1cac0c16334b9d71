"""Owns the numbers every view of a run shows, each defined once: how designs are counted, and
how a ratio is written with its interval.

The live view, `show`, `show --json`, the run's last lines, the export header (and
`best/candidate.py`), the HTML report and its plots all read these, so they cannot disagree.

Counting:

- A design is **valid** when the harness passed and timed it (`core.search.MEASURED`). Two
  flags may sit on a valid design: **unstable** (its timing did not settle after its
  re-timings) and **unreviewed** (the review a very fast design needs failed). A flagged
  design is still valid; it is **ranked** (on the leaderboard, eligible as the best) only
  when neither flag is raised.
- A design **did not pass** otherwise: invalid, error, needs_gpu, or judged cheating by a
  review (`flagged`).

Ratios: every speedup is written with its 95% interval (`DesignView.speedup_text`). The ratio
over the baseline the domain sets beside the reference (`BaselineNames.compared`) is chained
(design/reference, timed beside the design, times reference/baseline, timed beside that
baseline in another worker); it is written with the chained interval, or marked as chained
where no interval exists, and never bare. Each is said in the words of the run's domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stratagem.core.search import PASSED, DesignView, ranked, ratio_text
from stratagem.core.text import clip
from stratagem.domains.base import BaselineNames, baseline_names

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


def interval_text(value: float, low: float | None, high: float | None) -> str:
    """`1.23x [1.20, 1.26]`, as `DesignView.speedup_text` writes it (no interval: `1.23x`)."""
    if low is None or high is None:
        return f"{ratio_text(value)}x"
    return f"{ratio_text(value)}x [{ratio_text(low)}, {ratio_text(high)}]"


def _names(names: BaselineNames | None) -> BaselineNames:
    """`names`, or the default domain's (a caller that does not say whose run it shows)."""
    if names is not None:
        return names
    from stratagem.domains import DEFAULT, get_domain

    return baseline_names(get_domain(DEFAULT))


def chained_text(names: BaselineNames | None = None) -> str:
    """How a ratio over the compared baseline is marked: `chained via REFERENCE` (design/reference
    x reference/baseline, two paired ratios timed in different workers)."""
    return f"chained via {_names(names).reference}"


def second_text(v: DesignView, mark: bool = True, names: BaselineNames | None = None) -> str:
    """The chained speedup over the compared baseline (`BaselineNames.compared`; `names`: the
    run's domain's, None: the default domain's) with its interval: `1.02x [0.97, 1.08]`
    (`(chained via REFERENCE, no interval)` where none was recorded); `mark`: append why the
    baseline is no fair comparison (it fails correctness, or its timing did not settle)."""
    if v.speedup_compared is None:
        return "-"
    n = _names(names)
    if v.compared_low is None or v.compared_high is None:
        text = f"{ratio_text(v.speedup_compared)}x ({chained_text(n)}, no interval)"
    else:
        text = interval_text(v.speedup_compared, v.compared_low, v.compared_high)
    if mark and v.compared_fails:
        text += f" ({n.compared} fails correctness)"
    elif mark and v.compared_unstable:
        text += f" ({n.compared} baseline unstable)"
    return text


SecondVerdict = Literal["faster", "on par", "slower", "unknown", "unfair"]


def vs_second(v: DesignView) -> SecondVerdict | None:
    """How a design stands against the compared baseline: `on par` when the chained interval
    holds 1.00x, `faster` or `slower` beyond it, `unknown` when the baseline's timing did not
    settle, `unfair` when the baseline fails the correctness rule; None: not measured."""
    if v.speedup_compared is None:
        return None
    if v.compared_unstable:
        return "unknown"
    if v.compared_fails:
        return "unfair"
    if v.compared_low is not None and v.compared_high is not None and v.compared_low <= 1.0 <= v.compared_high:
        return "on par"
    return "faster" if v.speedup_compared >= 1.0 else "slower"


def second_sentence(v: DesignView, names: BaselineNames | None = None) -> str:
    """One plain sentence on the design against the compared baseline, its number and interval
    included ('' when not measured): what the run's last lines, the export header and the
    report say."""
    verdict = vs_second(v)
    if verdict is None or v.speedup_compared is None:
        return ""
    n = _names(names)
    base, short = n.compared_text, n.compared or n.compared_text
    num = (f"{second_text(v, mark=False, names=n)}, {chained_text(n)}" if v.compared_low is not None
           else second_text(v, mark=False, names=n))
    if verdict == "unknown":
        return (f"compared with {base}: unknown ({num}): the {short} baseline's timing stayed unstable "
                f"after re-timing ({clip(v.compared_unstable, 160)})")
    if verdict == "unfair":
        return (f"compared with {base}: no fair comparison ({num}): the {short} baseline fails the "
                f"correctness check every design must pass ({clip(v.compared_fails, 160)})")
    if verdict == "on par":
        return f"on par with {base}: {num}, an interval that holds 1.00x"
    if verdict == "faster":
        return f"faster than {base} too: {num}"
    return (f"slower than {base}: {num}; {base} of the reference runs "
            f"{1 / v.speedup_compared:.2f}x faster than this design here, so it is the better choice unless "
            f"you cannot {short}")
