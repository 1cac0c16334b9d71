"""Owns AUTO's context curation: which earlier designs the Strategist sees, and in how much text.

Four sections, each what its name says, and a design is shown in full in one of them only:

- **best**: the P highest paired ratios among the ranked designs (valid, stably timed), at most
  the better half of them, so a slow design is never shown as a best one;
- **worst**: the Q lowest paired ratios among the other valid designs (unstable ones included:
  they are valid), then, when fewer than Q remain, the oldest designs that did not pass;
- **most recent**: the newest designs, newest first, until R not shown elsewhere are in it;
  a newer design already shown as a best or a worst is named there (`Curated.newest`), so
  the section never passes over the newest designs;
- **failed**: F designs drawn at random from the other failures (`invalid`, `error`,
  `flagged`, `needs_gpu`).

Failure reports are compressed, and the whole selection is fitted to a token budget (about 4
characters per token) by shortening sources and then dropping the lowest-priority designs
(worst, then failed, then recent; the best last). The Implementor's cited designs are fitted by
the same rules (`fit_cited`). A source that must be shortened keeps what it changed from its
parents whole and loses its unchanged lines first (`truncate_source`).

Pure functions over records; the randomness comes from an explicit `random.Random`.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from stratagem.config import ContextConfig
from stratagem.core.search import MEASURED, DesignView, SearchState, ranked

Group = Literal["best", "worst", "recent", "failed"]
GROUPS: tuple[Group, ...] = ("best", "worst", "recent", "failed")

CHARS_PER_TOKEN = 4
"""The budget's rough conversion: one token is about four characters of code or English."""

TEMPLATE_OVERHEAD_CHARS = 6_000
"""Room kept for the prompt's own prose (instructions, headings) besides problem and designs."""

PER_DESIGN_OVERHEAD_CHARS = 200
"""Heading, status line and code fences around each design."""

MIN_SOURCE_CHARS = 400
"""A source is never shortened below this many characters (then designs are dropped instead)."""

FAILED_STATUSES = frozenset({"invalid", "error", "flagged", "needs_gpu"})

TRACEBACK_KEEP_LINES = 3
"""A traceback is cut to its last few frame lines and the exception line."""

_KEY_LINE = re.compile(
    r"error|exception|fail|mismatch|expected|assert|exceed|timed? ?out|not allowed|forbidden"
    r"|illegal|rejected|undefined|cannot|line \d+",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Curated:
    """The designs chosen for one Strategist prompt, per group, in display order."""

    best: tuple[DesignView, ...] = ()
    """Highest paired ratio first."""
    worst: tuple[DesignView, ...] = ()
    """Lowest paired ratio first, then failures, oldest first."""
    recent: tuple[DesignView, ...] = ()
    """Newest first: the designs the most recent section shows in full."""
    failed: tuple[DesignView, ...] = ()
    """In the random order they were drawn."""
    newest: tuple[str, ...] = ()
    """The most recent section in order, newest first: the ids of `recent` and of the newer
    designs shown in full in another section, which it names (every id is in a group)."""
    total: int = 0
    """How many designs the run had to choose from."""
    dropped_ids: tuple[str, ...] = ()
    """Designs chosen but left out to fit the token budget."""
    truncated_ids: tuple[str, ...] = ()
    """Designs whose source was shortened to fit the token budget."""
    chars: int = 0
    """Approximate size of the chosen designs as rendered (sources, reports, headings)."""

    def group(self, name: Group) -> tuple[DesignView, ...]:
        return getattr(self, name)

    @property
    def designs(self) -> tuple[DesignView, ...]:
        """Every chosen design, groups in priority order (best, recent, failed, worst)."""
        return (*self.best, *self.recent, *self.failed, *self.worst)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.designs)

    def ids_by_group(self) -> dict[str, tuple[str, ...]]:
        """Group name -> chosen design ids (what the run records beside the plan)."""
        return {g: tuple(d.id for d in self.group(g)) for g in GROUPS}

    def find(self, design_id: str) -> DesignView | None:
        return next((d for d in self.designs if d.id == design_id), None)


@dataclass
class _Pick:
    group: Group
    view: DesignView
    source_cap: int | None = None
    dropped: bool = False
    truncated: bool = field(default=False)


def curate(
    state: SearchState,
    cfg: ContextConfig,
    rng: random.Random,
    *,
    reserved_chars: int | None = None,
) -> Curated:
    """Choose the designs the Strategist sees this iteration.

    Args:
        state: the run so far (designs oldest first).
        cfg: counts (P, Q, R, F), token budget and failure-report size.
        rng: the only source of randomness (which failed designs are drawn).
        reserved_chars: characters of the budget taken by the rest of the prompt; default: the
            problem's source and its rules plus `TEMPLATE_OVERHEAD_CHARS`.
    """
    designs = list(state.designs)
    order = {id(d): i for i, d in enumerate(designs)}
    chosen: set[str] = set()

    def take(pool: Sequence[DesignView], n: int) -> list[DesignView]:
        out = []
        for d in pool:
            if len(out) >= n:
                break
            if d.id not in chosen:
                out.append(d)
                chosen.add(d.id)
        return out

    def age(d: DesignView) -> tuple[float, int]:
        return (d.created_at, order[id(d)])

    by_speed = ranked(designs)  # highest paired ratio first
    best = take(by_speed, min(cfg.best, (len(by_speed) + 1) // 2))
    timed = [d for d in designs if d.status in MEASURED and d.speedup is not None]
    lowest = sorted(timed, key=lambda d: (d.speedup or 0.0, age(d)))
    failures = sorted((d for d in designs if d.status in FAILED_STATUSES), key=age)
    worst = take(lowest, cfg.worst)
    worst += take(failures, cfg.worst - len(worst))
    newest_first = sorted(designs, key=age, reverse=True)
    recent: list[DesignView] = []
    newest: list[str] = []
    for d in newest_first:
        if len(recent) >= cfg.recent:
            break
        if d.id not in chosen:
            recent.append(d)
            chosen.add(d.id)
        newest.append(d.id)
    failed_pool = [d for d in designs if d.status in FAILED_STATUSES and d.id not in chosen]
    failed = take(rng.sample(failed_pool, min(cfg.failed, len(failed_pool))), cfg.failed)

    picks = [
        *(_Pick("best", d) for d in best),
        *(_Pick("recent", d) for d in recent),
        *(_Pick("failed", d) for d in failed),
        *(_Pick("worst", d) for d in worst),
    ]
    kept = _shown(picks, state, cfg, reserved_chars)

    def group(name: Group) -> tuple[DesignView, ...]:
        return tuple(p.view for p in kept if p.group == name)

    return Curated(
        best=group("best"),
        worst=group("worst"),
        recent=group("recent"),
        failed=group("failed"),
        newest=tuple(i for i in newest if i in {p.view.id for p in kept}),
        total=len(designs),
        dropped_ids=tuple(p.view.id for p in picks if p.dropped),
        truncated_ids=tuple(p.view.id for p in kept if p.truncated),
        chars=sum(_size(p) for p in kept),
    )


def fit_cited(cited: Sequence[DesignView], state: SearchState, cfg: ContextConfig) -> tuple[DesignView, ...]:
    """The designs a plan cites, in its order, fitted to the Implementor's prompt by the
    Strategist's rules (`_fit`): the best of them and the newest stay whole; the others are
    shortened first (the weakest and oldest first), then left out."""
    top = next(iter(ranked(cited)), None)
    newest = max(cited, key=lambda d: d.created_at, default=None)
    others = sorted((d for d in cited if d is not top and d is not newest),
                    key=lambda d: (d.speedup or 0.0, d.created_at), reverse=True)  # lowest priority last
    picks = [*(_Pick("best", d) for d in (top,) if d is not None),
             *(_Pick("recent", d) for d in (newest,) if d is not None and d is not top),
             *(_Pick("worst", d) for d in others)]
    shown = {p.view.id: p.view for p in _shown(picks, state, cfg)}
    return tuple(shown[d.id] for d in cited if d.id in shown)


def _shown(
    picks: list[_Pick], state: SearchState, cfg: ContextConfig, reserved_chars: int | None = None
) -> list[_Pick]:
    """The picks kept in the prompt's budget, their reports compressed and their sources cut to
    fit (each against its parents in `state`)."""
    for p in picks:
        p.view = replace(p.view, report=compress_report(p.view.report, cfg.failure_report_chars))
    reserved = (
        reserved_chars
        if reserved_chars is not None
        else len(state.problem.source) + sum(len(r) + 3 for r in state.rules) + TEMPLATE_OVERHEAD_CHARS
    )
    _fit(picks, max(cfg.token_budget * CHARS_PER_TOKEN - reserved, 0))
    sources = {d.id: d.source for d in state.designs}
    kept = [p for p in picks if not p.dropped]
    for p in kept:
        if p.source_cap is not None and len(p.view.source) > p.source_cap:
            parents = [sources[i] for i in p.view.parents if i in sources]
            p.view = replace(p.view, source=truncate_source(p.view.source, p.source_cap, parents))
            p.truncated = True
    return kept


def _size(p: _Pick) -> int:
    src = len(p.view.source) if p.source_cap is None else min(len(p.view.source), p.source_cap)
    return src + len(p.view.report) + PER_DESIGN_OVERHEAD_CHARS


def _total(picks: list[_Pick]) -> int:
    return sum(_size(p) for p in picks if not p.dropped)


def _fit(picks: list[_Pick], budget_chars: int) -> None:
    """Fit the picks to the budget, keeping what matters whole: the best designs and the newest
    one. The others are shortened first (as far as needed, down to `MIN_SOURCE_CHARS`, the
    weakest and oldest first: the list's tail), then dropped; only then do the kept ones share
    what is left, and the highest-priority pick is never dropped (its source is cut as far as
    needed instead).
    """
    if not picks or _total(picks) <= budget_chars:
        return
    newest = next((p for p in picks if p.group == "recent"), None)
    rest = [p for p in picks if p.group != "best" and p is not newest][::-1]  # lowest priority first
    if not _trim_others(picks, rest, budget_chars):  # 1. the others shortened, 2. then left out
        _share_the_rest(picks, budget_chars)


def _trim_others(picks: list[_Pick], rest: list[_Pick], budget_chars: int) -> bool:
    """Steps 1-2 of `_fit`; whether they were enough (False once all are dropped, unchecked)."""
    for p in rest:  # 1. the others shortened
        if (over := _total(picks) - budget_chars) <= 0:
            return True
        if len(p.view.source) > MIN_SOURCE_CHARS:
            p.source_cap = max(len(p.view.source) - over, MIN_SOURCE_CHARS)
    for p in rest:  # 2. then left out
        if _total(picks) <= budget_chars:
            return True
        p.dropped = True
    return False


def _share_the_rest(picks: list[_Pick], budget_chars: int) -> None:
    """Steps 3-4 of `_fit`: the kept ones share what is left, the lowest priority dropped while
    still over; then the last one standing gets what is left of the budget."""
    live = [p for p in picks if not p.dropped]
    share = max(budget_chars // len(live) - PER_DESIGN_OVERHEAD_CHARS, MIN_SOURCE_CHARS)
    for p in live:
        if len(p.view.source) > share:
            p.source_cap = share
    while _total(picks) > budget_chars and len(live) > 1:
        live.pop().dropped = True
    if _total(picks) > budget_chars:
        top = live[0]
        room = budget_chars - len(top.view.report) - PER_DESIGN_OVERHEAD_CHARS
        top.source_cap = max(room, MIN_SOURCE_CHARS // 2)


def truncate_source(source: str, max_chars: int, parents: Sequence[str] = ()) -> str:
    """Shorten a source to about `max_chars`, marking each cut; whole lines only where possible.

    Against its parents' sources, its new part (the lines no parent has, by difflib) is kept
    whole and the unchanged lines are cut first, those farthest from a new line first. Without
    parents, or when its new part alone is too long, the head and tail are kept.
    """
    if len(source) <= max_chars:
        return source
    lines = source.splitlines()
    if parents and (kept := _new_part(lines, parents, max_chars)) is not None:
        if len(kept) <= max_chars:
            return kept
        lines = kept.splitlines()
    marker = "# ... [{n} lines cut to fit the context budget] ..."
    head_budget = int(max_chars * 0.7)
    tail_budget = max_chars - head_budget - len(marker) - 8
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > head_budget:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    used = 0
    for line in reversed(lines[len(head):]):
        if used + len(line) + 1 > tail_budget:
            break
        tail.append(line)
        used += len(line) + 1
    tail.reverse()
    cut = len(lines) - len(head) - len(tail)
    if not head and not tail:  # one enormous line
        return source[: max(max_chars - 40, 0)] + "\n# ... [cut to fit the context budget]"
    return "\n".join([*head, marker.format(n=cut), *tail])


_UNCHANGED_MARKER = "# ... [{n} lines as in its parent, cut to fit the context budget] ..."


def _new_part(lines: list[str], parents: Sequence[str], max_chars: int) -> str | None:
    """`lines` with its new part whole and as many unchanged lines as fit, nearest the new
    part first; None when every line is new or none is."""
    new = set(range(len(lines)))
    for parent in parents:
        matcher = difflib.SequenceMatcher(None, parent.splitlines(), lines, autojunk=False)
        for block in matcher.get_matching_blocks():
            new -= set(range(block.b, block.b + block.size))
    if not new or len(new) == len(lines):
        return None
    n = len(lines)
    away = _distances_to(new, n)
    marks = sum(1 for i in range(n) if i not in new and (i == 0 or i - 1 in new))
    room = max_chars - sum(len(lines[i]) + 1 for i in new) - marks * (len(_UNCHANGED_MARKER) + 3)
    keep = set(new)
    for i in sorted(set(range(n)) - new, key=lambda i: (away[i], i)):
        if room < len(lines[i]) + 1:
            break
        keep.add(i)
        room -= len(lines[i]) + 1
    return _join_kept(lines, keep)


def _distances_to(new: set[int], n: int) -> list[int]:
    """For each of `n` lines, how many lines away the nearest of `new` is (`n` when none)."""
    away = [n] * n
    for order in (range(n), range(n - 1, -1, -1)):
        last: int | None = None
        for i in order:
            last = i if i in new else last
            away[i] = min(away[i], abs(i - last) if last is not None else n)
    return away


def _join_kept(lines: list[str], keep: set[int]) -> str:
    """The kept lines, each run of cut ones replaced by a marker counting them."""
    out: list[str] = []
    cut = 0
    for i, line in enumerate(lines):
        if i in keep:
            if cut:
                out.append(_UNCHANGED_MARKER.format(n=cut))
            out.append(line)
            cut = 0
        else:
            cut += 1
    if cut:
        out.append(_UNCHANGED_MARKER.format(n=cut))
    return "\n".join(out)


def compress_report(report: str, max_chars: int) -> str:
    """Compress a validators' failure report to at most `max_chars` characters.

    Keeps the first line (the first validator's failure) and the key lines (validator headings,
    errors, mismatches, line numbers), cuts each Python traceback to its last frames and its
    exception line, and fills what room is left with the other lines in order.
    """
    if len(report) <= max_chars:
        return report
    lines = _cut_tracebacks(report.splitlines())
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    rank = [_line_rank(i, line) for i, line in enumerate(lines)]
    keep: set[int] = set()
    used = 0
    omitted_note = 40  # room for the "... (N lines cut)" note
    for level in (0, 1, 2):
        for i, line in enumerate(lines):
            if rank[i] != level or i in keep:
                continue
            cost = len(line) + 1
            if used + cost + omitted_note <= max_chars:
                keep.add(i)
                used += cost
            elif level == 0:  # the first line alone is too long: cut it
                room = max(max_chars - omitted_note - 1, 10)
                lines[i] = line[: room - 3] + "..."
                keep.add(i)
                used += len(lines[i]) + 1
    out = [lines[i] for i in sorted(keep)]
    cut = len(lines) - len(out)
    if cut:
        out.append(f"... ({cut} lines cut)")
    return "\n".join(out)[:max_chars]


def _line_rank(i: int, line: str) -> int:
    if i == 0:
        return 0
    stripped = line.lstrip()
    if stripped.startswith("[") or stripped.startswith("Skipped:") or _KEY_LINE.search(line):
        return 1
    return 2


def _cut_tracebacks(lines: list[str]) -> list[str]:
    """Replace each `Traceback (most recent call last):` block by its last frames."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Traceback (most recent call last)" not in line:
            out.append(line)
            i += 1
            continue
        j = i + 1
        while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("\t")):
            j += 1
        frames = lines[i + 1 : j]
        kept = frames[-TRACEBACK_KEEP_LINES:] if frames else []
        cut = len(frames) - len(kept)
        out.append(line + (f" [{cut} lines cut]" if cut else ""))
        out.extend(kept)
        i = j  # the exception line (unindented) is kept as an ordinary line
    return out
