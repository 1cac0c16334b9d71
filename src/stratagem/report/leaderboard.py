"""Owns the terminal views of a run's results: the leaderboard, the designs that did not pass,
the iterations, strategy counts and the spend line (rich renderables built from the store's
records; counts and ratios come from `search/numbers.py`, the one place every view reads).

Tables fit the console they are printed on: each has one flexible text column (folded at
spaces) and optional columns that drop out, least useful first, when the console is too narrow
for them, so an 80-column terminal shows whole words, not a few letters a line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from stratagem.core.objective import Objective
from stratagem.core.search import DesignView, ranked
from stratagem.core.text import clip
from stratagem.domains.base import BaselineNames
from stratagem.search import numbers
from stratagem.search.headline import ratios_of
from stratagem.search.numbers import board_marks, counts, did_not_pass, not_ranked_because
from stratagem.store.records import IterationRecord

RUNTIME = Objective("runtime", "ms", "minimize")

WHO = "author · strategy"


def ratio_header(name: str) -> str:
    """A ratio column's header: `vs NAME [95% CI]` (NAME: a baseline as the domain names it)."""
    return f"vs {name} [95% CI]"

FLEX_MIN = 24
"""The least width the flexible column (author, reason, note) keeps before optional columns
drop out."""


@dataclass(frozen=True)
class Col:
    """One column of a `FittedTable`."""

    header: str
    justify: str = "right"
    flex: bool = False
    """The one column that takes the width left and folds its text at spaces."""
    stack: bool = False
    """A `1.23x [1.20, 1.26]` column: in a stacked layout its interval goes on a second line."""


@dataclass(frozen=True)
class Layout:
    """The headers a `FittedTable` shows at one width, and whether its ratios are stacked."""

    headers: tuple[str, ...]
    stacked: bool = False


class FittedTable:
    """A table whose columns fit the console it is printed on: the first of its layouts (widest
    first) whose fixed columns leave the flexible one `flex_min` cells; its notes printed under
    it at the console's width."""

    def __init__(self, title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], notes: str | None = None,
                 layouts: Sequence[Layout] = (), flex_min: int = FLEX_MIN, empty: str = "none") -> None:
        self.title = title
        self.empty = empty
        """What the table says instead of an empty table."""
        self.cols = {c.header: c for c in cols}
        self.rows = [dict(zip(self.cols, r, strict=True)) for r in rows]
        self.notes = notes
        self.layouts = tuple(layouts) or (Layout(tuple(self.cols)),)
        self.flex_min = flex_min

    def _cell(self, header: str, row: Mapping[str, str], stacked: bool) -> str:
        text = row[header]
        return _stacked(text) if stacked and self.cols[header].stack else text

    def _header(self, header: str, stacked: bool) -> str:
        return _stacked(header) if stacked and self.cols[header].stack else header

    def _natural(self, lay: Layout) -> dict[str, int]:
        """Each column's width unfolded (its widest cell or header)."""
        return {h: max([_cells(self._header(h, lay.stacked))] + [_cells(self._cell(h, r, lay.stacked))
                                                                  for r in self.rows])
                for h in lay.headers}

    def layout(self, width: int) -> Layout:
        """The widest layout that fits `width` cells (the narrowest when none does)."""
        for lay in self.layouts:
            natural = self._natural(lay)
            fixed = sum(n for h, n in natural.items() if not self.cols[h].flex) + 3 * len(lay.headers) + 1
            flex = sum(min(n, self.flex_min) for h, n in natural.items() if self.cols[h].flex)
            if fixed + flex <= width:
                return lay
        return self.layouts[-1]

    def table(self, width: int) -> Table:
        lay = self.layout(width)
        natural = self._natural(lay)
        t = Table(title=self.title, title_justify="left")
        for h in lay.headers:
            c = self.cols[h]
            if c.flex:  # never wider than its text: the layout was chosen on that width
                t.add_column(h, justify="left", overflow="fold", min_width=min(self.flex_min, natural[h]))
            else:
                t.add_column(self._header(h, lay.stacked), justify=c.justify, no_wrap=True)  # type: ignore[arg-type]
        for r in self.rows:
            t.add_row(*(self._cell(h, r, lay.stacked) for h in lay.headers))
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.rows:
            yield self.table(options.max_width)
        else:
            yield Text(f"{self.title}: {self.empty}", style="italic")
        if self.notes:
            yield Text(self.notes, style="dim")


def _stacked(text: str) -> str:
    return text.replace(" [", "\n[", 1)


def _cells(text: str) -> int:
    return max((Text.from_markup(line).cell_len for line in text.splitlines()), default=0)


def who(v: DesignView) -> str:
    """Author and strategy in words that fold at spaces (`recipe: compile + channels_last`),
    the strategy left out when the author already names it."""
    author = (v.author or "-").replace("+", " + ")
    if author.startswith("recipe:"):
        author = "recipe: " + author[len("recipe:"):]
    strategy = v.strategy or "-"
    if strategy in ("-", "recipe") or author == "-":
        return author if author != "-" else strategy
    return f"{author} · {strategy}"


def leaderboard(
    views: Sequence[DesignView], reference_ms: Mapping[str, float | None], top: int = 10,
    objective: Objective = RUNTIME, *, names: BaselineNames,
) -> FittedTable:
    """Ranked designs by paired speedup (the improvement over the reference in the domain's
    `objective`), each ratio with its interval, against the reference and (chained) against
    the baseline the domain sets beside it (`names`): the same numbers the store, `show --json`
    and the agents' context hold."""
    n = names
    board = ranked(views)[:top]
    rows = []
    for mark, v in zip(board_marks(board), board, strict=True):  # ratios it is ranked by (confirmed first)
        r = ratios_of(v, n)
        rows.append((mark, v.id[:10], r.reference.cell(), r.compared.cell() if r.compared else "-",
                     f"{v.runtime_ms or 0.0:.4g}", "-" if v.iteration is None else str(v.iteration), who(v)))
    value = f"{objective.name} {objective.unit}"
    first, second = ratio_header(n.reference), ratio_header(n.compared or "-")
    cols = (Col("#"), Col("design", "left"), Col(first, stack=True), Col(second, stack=True), Col(value),
            Col("iter"), Col(WHO, flex=True))
    core = ("#", "design", first, second) if n.compared else ("#", "design", first)  # no second baseline: no column
    layouts = (Layout((*core, value, "iter", WHO)), Layout((*core, WHO)), Layout((*core, WHO), stacked=True),
               Layout(core, stacked=True))
    return FittedTable("Leaderboard", cols, rows, _leaderboard_notes(views, board, reference_ms, n), layouts,
                       empty="no ranked design yet (a valid design whose timing settled)")


def _leaderboard_notes(views: Sequence[DesignView], board: Sequence[DesignView],
                       reference_ms: Mapping[str, float | None], n: BaselineNames) -> str | None:
    notes = []
    r, c = n.reference, n.compared or "-"
    shown = [ratios_of(v, n) for v in board]
    if any(x.reference.confirmed for x in shown):
        notes.append("c: confirmed (the confirmation round's ratio, re-timed in independent workers; its designs "
                     "rank first, by it); the others are search-time figures")
    if any(x.compared is not None and x.compared.chained for x in shown):
        notes.append(f"vs {c}: chained via {r} (design/{r} x {r}/{c}, timed in different workers), "
                     "with the interval of both")
    if any(x.compared is not None and x.compared.itself for x in shown):
        notes.append(f"itself: the design is the {n.compared_text} baseline's own recipe")
    if any(a.verdict == "on par" for x in shown for a in x.all()):
        notes.append("~ within noise: the interval holds 1.00x")
    if times := numbers.times_text(reference_ms, n):
        notes.append(times)
    c = counts(views)
    if c.ranked < c.valid:
        notes.append("valid, not ranked: " + "; ".join(
            f"{v.id[:10]} {v.speedup_text()} at search time ({clip(not_ranked_because(v), 100)})"
            for v in [v for v in views if not_ranked_because(v)][:8]))
    failing = next((f for v in ranked(views) if (f := v.compared_fails)), "")
    if failing:
        notes.append(f"* the {n.compared_text} baseline fails the correctness check every design must pass, so "
                     f"speedups against it are not a fair comparison: {clip(failing, 160)}")
    shaky = next((u for v in ranked(views) if (u := v.compared_unstable)), "")
    if shaky and not failing:
        notes.append(f"* the {n.compared_text} baseline's timing stayed unstable after re-timing, so speedups "
                     f"against it carry its noise (`stratagem baseline --refresh` measures it again): "
                     f"{clip(shaky, 160)}")
    return "\n".join(notes) or None


def failure(v: DesignView) -> tuple[str, str]:
    """(the first failing validator, its kind and reason) of a design that did not pass, from
    its report (`[validator] kind: reason`); a review's or a stability reason otherwise."""
    first = (v.report or "").strip().splitlines()[0] if (v.report or "").strip() else ""
    if first.startswith("[") and "] " in first:
        name, rest = first[1:].split("] ", 1)
        return name, rest
    if v.status == "unstable":
        return "timing", f"unstable: {v.stability}"
    return v.status, first or "-"


def failures_table(views: Sequence[DesignView], last: int = 12) -> FittedTable | None:
    """Every design that did not pass (the latest `last`): which validator failed it and why.
    Valid designs whose timing is unstable are not here: they passed (the leaderboard names
    them)."""
    bad = [v for v in views if did_not_pass(v)]
    if not bad:
        return None
    rows = []
    for v in sorted(bad, key=lambda v: v.created_at)[-last:]:
        where, why = failure(v)
        rows.append((v.id[:10], "-" if v.iteration is None else str(v.iteration), who(v), where, clip(why, 300)))
    cols = (Col("design", "left"), Col("iter"), Col("author", "left"), Col("failed at", "left"),
            Col("reason", flex=True))
    layouts = (Layout(("design", "iter", "author", "failed at", "reason")),
               Layout(("design", "author", "failed at", "reason")), Layout(("design", "failed at", "reason")))
    notes = f"{len(bad) - last} earlier ones: `stratagem show --json RUN_DIR` lists all" if len(bad) > last else None
    return FittedTable(f"Designs that did not pass ({len(bad)})", cols, rows, notes, layouts)


def strategy_table(counts_by: Mapping[str, Mapping[str, int]]) -> Table:
    """Strategy -> designs made and valid ones (valid as every view counts it)."""
    t = Table(title="Strategies", title_justify="left")
    t.add_column("strategy")
    t.add_column("designs", justify="right")
    t.add_column("valid", justify="right")
    for name, c in sorted(counts_by.items()):
        t.add_row(name, str(c["designs"]), str(c["valid"]))
    return t


def best_after(iterations: Sequence[IterationRecord], views: Sequence[DesignView]
               ) -> Iterator[tuple[IterationRecord, list[DesignView], DesignView | None]]:
    """Each iteration with the designs it made and the best ranked design after it."""
    by_id = {v.id: v for v in views}
    best: DesignView | None = None
    for it in iterations:
        made = [by_id[i] for i in it.design_ids if i in by_id]
        top = ranked(made)
        if top and (best is None or (top[0].speedup or 0) > (best.speedup or 0)):
            best = top[0]
        yield it, made, best


def iterations_table(iterations: Sequence[IterationRecord], views: Sequence[DesignView],
                     last: int = 20, *, names: BaselineNames) -> FittedTable:
    """Each iteration: status, strategy, designs made, valid ones (as every view counts them), the
    best speedup after it,
    and its note (why it ended as it did: failed agent calls, a stop, a review)."""
    rows = []
    for it, made, best in best_after(iterations, views):
        strategy = str((it.plan or {}).get("strategy") or "-")
        rows.append((str(it.n), it.status, strategy, str(len(made)), str(counts(made).valid),
                     "-" if best is None else best.speedup_text(), clip(it.note or "", 300)))
    best_h = "best after: " + ratio_header(names.reference)
    cols = (Col("#"), Col("status", "left"), Col("strategy", "left"), Col("made"), Col("valid"),
            Col(best_h, stack=True), Col("note", flex=True))
    layouts = (Layout(("#", "status", "strategy", "made", "valid", best_h, "note")),
               Layout(("#", "status", "made", "valid", best_h, "note")),
               Layout(("#", "status", "made", "valid", best_h, "note"), stacked=True),
               Layout(("#", "made", "valid", best_h, "note"), stacked=True),
               Layout(("#", best_h, "note"), stacked=True))
    return FittedTable("Iterations", cols, rows[-last:], layouts=layouts)
