"""Owns a run's headline, built once: the best design, its ratio over every baseline (the
reference and the one the domain sets beside it) with their intervals, whether each comes from
the confirmation round, and the plain words every view says them in.

Every view of a run reads it: the run's last lines, `show` and `show --json`, the export header
(and `best/`), the HTML report, `compare`, the suite summaries and the MCP tools. A design's
own ratios (`ratios_of`) are the leaderboard's cells too, so a table ordered by the
confirmation round shows the confirmed ratios it is ordered by.

Rules:

- A confirmed design is said by its confirmation round (over the reference, and over the
  compared baseline timed in the same blocks); the search-time figure is beside it, never
  instead of it.
- A design that is the compared baseline's own recipe (`BaselineNames.compared_authors`) is
  never shown against itself: its ratio there is `itself`.
- A ratio over a baseline that fails the correctness rule is `unfair`; over one whose timing did
  not settle, `unknown`; else `faster`, `on par` (the interval holds 1.00x) or `slower`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stratagem.core.search import DesignView, ranked, ratio_text
from stratagem.core.text import clip
from stratagem.domains.base import BaselineNames

Verdict = Literal["faster", "on par", "slower", "unknown", "unfair", "itself"]


def interval_text(value: float, low: float | None, high: float | None) -> str:
    """`1.23x [1.20, 1.26]` (no interval: `1.23x`)."""
    if low is None or high is None:
        return f"{ratio_text(value)}x"
    return f"{ratio_text(value)}x [{ratio_text(low)}, {ratio_text(high)}]"


@dataclass(frozen=True)
class Against:
    """A design against one baseline, as every view says it."""

    baseline: str
    """The baseline in the domain's words (`BaselineNames`: the reference, or the one set beside it)."""
    key: str
    """Its key in the records and in JSON (`reference`, or `BaselineNames.compared`)."""
    ratio: float | None
    low: float | None = None
    high: float | None = None
    confirmed: bool = False
    """From the confirmation round (else the search-time figure)."""
    chained: bool = False
    """Chained via the reference (design/reference x reference/baseline, two workers)."""
    via: str = ""
    """The reference's name, for a chained ratio's words."""
    itself: bool = False
    """The design is this baseline's own recipe: no ratio against itself."""
    fails: str = ""
    """Why the baseline fails the correctness rule ('' when it passes)."""
    unstable: str = ""
    """Why the baseline's timing did not settle ('' when it did)."""

    @property
    def verdict(self) -> Verdict | None:
        """Where the design stands (None: not measured)."""
        if self.itself:
            return "itself"
        if self.ratio is None:
            return None
        if self.unstable:
            return "unknown"
        if self.fails:
            return "unfair"
        if self.low is not None and self.high is not None and self.low <= 1.0 <= self.high:
            return "on par"
        return "faster" if self.ratio >= 1.0 else "slower"

    def number(self) -> str:
        """The ratio with its interval, or what stands in for it: `1.23x [1.20, 1.26]`,
        `1.23x (chained via REFERENCE, no interval)`, `itself`, `-`."""
        if self.itself:
            return "itself"
        if self.ratio is None:
            return "-"
        if self.chained and (self.low is None or self.high is None):
            return f"{ratio_text(self.ratio)}x (chained via {self.via or 'the reference'}, no interval)"
        return interval_text(self.ratio, self.low, self.high)

    def cell(self) -> str:
        """A table cell: the number, `c` when confirmed, `*` when the baseline is no fair
        comparison, `~` when the interval holds 1.00x."""
        marks = (" c" if self.confirmed else "") + (" ~" if self.verdict == "on par" else "") + (
            " *" if self.verdict in ("unknown", "unfair") else "")
        num, bracket, rest = self.number().partition(" [")
        return num + marks + (bracket + rest if bracket else "")  # the marks by the ratio, the interval after

    def sentence(self) -> str:
        """One plain sentence: the number, how it was measured, and what it means."""
        b, v = self.baseline, self.verdict
        if v == "itself":
            return f"this design is {b} itself (the {b} baseline's own recipe): it is not compared with itself"
        if v is None:
            return f"vs {b}: not measured"
        how = ("confirmed (re-timed in independent workers)" if self.confirmed
               else f"chained via {self.via}" if self.chained else "paired, 95% interval")
        num = f"{self.number()}, {how}"
        if v == "unknown":
            return f"vs {b}: unknown ({num}): the {b} baseline's timing did not settle ({clip(self.unstable, 160)})"
        if v == "unfair":
            return (f"vs {b}: no fair comparison ({num}): the {b} baseline fails the correctness check every "
                    f"design must pass ({clip(self.fails, 160)})")
        if v == "on par":
            return f"on par with {b}: {num}, an interval that holds 1.00x"
        if v == "faster":
            return f"faster than {b}: {num}"
        assert self.ratio is not None
        return f"slower than {b}: {num}; {b} runs {1 / self.ratio:.2f}x faster than this design here"

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "ratio": self.ratio,
                "ci": None if self.low is None or self.high is None else [self.low, self.high],
                "confirmed": self.confirmed, "chained": self.chained, "itself": self.itself,
                "verdict": self.verdict, "text": self.number()}


@dataclass(frozen=True)
class Ratios:
    """A design's ratios over the reference and the compared baseline (None: the domain has none)."""

    reference: Against
    compared: Against | None
    search: Against
    """The search-time ratio over the reference (the same as `reference` when not confirmed)."""

    def all(self) -> tuple[Against, ...]:
        return (self.reference, *((self.compared,) if self.compared is not None else ()))


def ratios_of(v: DesignView, names: BaselineNames) -> Ratios:
    """`v`'s ratios, confirmed where the round timed them, in the words of `names`."""
    search = Against(names.reference, "reference", v.speedup, v.speedup_low, v.speedup_high)
    c = v.confirmed
    ref = search
    if c is not None and c.vs_reference is not None:
        r = c.vs_reference
        ref = Against(names.reference, "reference", r.ratio, r.low, r.high, confirmed=True)
    compared = None
    if names.compared:
        label = names.compared_text
        if v.author and v.author in names.compared_authors:
            compared = Against(label, names.compared, None, itself=True)
        elif c is not None and c.vs_reference is not None and c.vs_compared is not None:
            k = c.vs_compared
            compared = Against(label, names.compared, k.ratio, k.low, k.high, confirmed=True,
                               fails=v.compared_fails)
        else:
            compared = Against(label, names.compared, v.speedup_compared, v.compared_low, v.compared_high,
                               chained=v.speedup_compared is not None, via=names.reference, fails=v.compared_fails,
                               unstable=v.compared_unstable)
    return Ratios(ref, compared, search)


@dataclass(frozen=True)
class Headline:
    """A run's result, as every view says it."""

    names: BaselineNames
    top: DesignView | None
    """The first ranked design (the confirmation round's order first), whether or not it beats
    the reference."""
    ratios: Ratios | None
    """`top`'s ratios (None: no ranked design)."""

    @property
    def best(self) -> DesignView | None:
        """The run's best design: `top` when it beats the reference by more than its interval."""
        return self.top if self.top is not None and self.top.beats_reference else None

    @property
    def confirmed(self) -> bool:
        return self.ratios is not None and self.ratios.reference.confirmed

    def no_gain(self) -> str:
        """Why the run has no best design ('' when it has one)."""
        if self.best is not None:
            return ""
        if self.top is None or self.ratios is None:
            return "no valid, stably timed design was found"
        return (f"no design beats {self.names.reference} by more than its measurement's interval (the fastest, "
                f"{self.top.id[:10]}, measured {self._reference_text()})")

    def _reference_text(self) -> str:
        """`1.54x [1.50, 1.58] vs REFERENCE, confirmed (search time: 1.45x [1.40, 1.50])`, or the
        search-time figure alone, marked as paired."""
        assert self.ratios is not None
        r = self.ratios
        return f"{r.reference.number()} vs {self.names.reference}" + (
            f", confirmed (search time: {r.search.number()})" if r.reference.confirmed
            else " (paired, 95% interval)")

    def lines(self) -> list[str]:
        """The headline in words: the design and its ratio over the reference (the search-time
        figure beside a confirmed one), then its standing against the compared baseline."""
        if self.top is None or self.ratios is None:
            return [self.no_gain()]
        r = self.ratios
        head = f"best design {self.top.id[:12]}: {self._reference_text()}" if self.best is not None else self.no_gain()
        out = [head]
        if r.compared is not None:
            out.append(r.compared.sentence())
        rule = self.top.measures.correctness_rule
        if rule:  # which rule passed it, and at what precision the reference ran
            name, _, why = rule.partition(": ")
            out.append(f"correctness decided by the {name} rule: {why}" if why else f"correctness: {rule}")
        return out

    def to_json(self) -> dict[str, Any]:
        r = self.ratios
        return {"design": self.top.id if self.top is not None else None,
                "beats_reference": self.best is not None, "confirmed": self.confirmed,
                "vs": {} if r is None else {a.key: a.to_json() for a in r.all()},
                "search": None if r is None else r.search.to_json(),
                "no_gain": self.no_gain() or None, "lines": self.lines()}


def headline_of(views: Sequence[DesignView], names: BaselineNames) -> Headline:
    """The headline of a run's designs (`views`, confirmation numbers applied)."""
    order = ranked(views)
    top = order[0] if order else None
    return Headline(names, top, ratios_of(top, names) if top is not None else None)
