"""Owns the statistics of a confirmation round: each design's ratio over the reference from
several independent timing blocks (one process each), with an interval that covers the spread
between blocks and not only within them; ratios over the baseline the domain sets beside the
reference (`BaselineNames.compared`), measured in the same blocks; and which designs are tied
with the best.

Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stratagem.core.paired import BOOTSTRAP_RESAMPLES, Ratio, bootstrap_median

T_975: tuple[float, ...] = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                            2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
"""Student's t, two-sided 95%, for 1..20 degrees of freedom (1.96 beyond)."""


def between_blocks(blocks: Sequence[Sequence[float]], seed: int = 0,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> Ratio | None:
    """The median of every block's pair ratios, with a 95% interval that holds both sources of
    error: between independent processes, a Student-t interval over the blocks' log medians
    (k blocks, k - 1 degrees of freedom: wide with few blocks, as it should be), and within
    them, a percentile bootstrap over the pooled pair ratios; the interval is the union of the
    two. One block has no between-process spread to show (`Ratio.pairs` counts the pooled pair
    ratios; the caller knows the blocks). None when no block has a ratio."""
    kept = [list(b) for b in blocks if b]
    if not kept:
        return None
    pooled = [x for b in kept for x in b]
    within = bootstrap_median(pooled, seed, resamples)
    low, high = within.low, within.high
    if len(kept) >= 2:
        logs = [math.log(statistics.median(b)) for b in kept]
        t = T_975[len(kept) - 2] if len(kept) - 2 < len(T_975) else 1.96
        half = t * statistics.stdev(logs) / math.sqrt(len(kept))
        mean = statistics.fmean(logs)
        low, high = min(low, math.exp(mean - half)), max(high, math.exp(mean + half))
    return Ratio(within.ratio, min(low, within.ratio), max(high, within.ratio), len(pooled))


def per_block(values: Sequence[float]) -> Ratio | None:
    """A ratio known once per block (a design over the compared baseline, both paired with the
    reference in that block): the median, and the range of the blocks as its interval."""
    xs = [v for v in values if v > 0 and math.isfinite(v)]
    if not xs:
        return None
    return Ratio(statistics.median(xs), min(xs), max(xs), len(xs))


@dataclass(frozen=True)
class ConfirmedDesign:
    """One design's confirmed numbers (stored as `to_json`: its two ratios under `vs_<key>`,
    the keys the domain gives its reference and its compared baseline in the records, PyTorch's
    `vs_eager` and `vs_compile`)."""

    design_id: str
    vs_reference: Ratio | None
    """Over the reference, fresh inputs per call (the search's condition), across blocks."""
    warm: Ratio | None
    """A warm loop over one input set (a user's own benchmark loop), across blocks."""
    vs_compared: Ratio | None
    """Over the compared baseline timed in the same blocks (not chained across processes)."""
    block_medians: tuple[float, ...]
    search: Ratio | None = None
    """The search-time ratio over the reference, for comparison."""
    error: str = ""
    tied_with_best: bool = False
    """Its interval and the best's overlap (the best itself, when another is tied with it)."""
    rank: int | None = None
    """1-based, dense: designs tied with the best share rank 1, the next group rank 2, ..."""
    blocks: int = 0
    """Blocks (independent processes) that timed it on a quiet machine."""

    @property
    def search_agrees(self) -> bool | None:
        """Whether the search-time figure agrees with the confirmed one: their intervals overlap
        (None: either unknown). Both are estimates: a search-time interval from one process is
        tight (+-0.1% on the H100's ReLU) while processes differ by more, so asking it to hold
        the confirmed ratio called 1.01x [1.00, 1.01] against 1.01x [1.00, 1.01] a miss; a
        search-time figure a busy machine inflated (3x against a confirmed 1x) still differs."""
        s, c = self.search, self.vs_reference
        if s is None or c is None:
            return None
        return s.low <= c.high and c.low <= s.high

    def to_json(self, reference: str, compared: str | None) -> dict[str, Any]:
        """Keyed by the domain's words: `reference` (its reference's key), `compared` (its
        compared baseline's, None: it has none)."""
        def j(r: Ratio | None) -> dict[str, Any] | None:
            return r.to_json() if r is not None else None

        return {"design_id": self.design_id, f"vs_{reference}": j(self.vs_reference), "warm": j(self.warm),
                **({f"vs_{compared}": j(self.vs_compared)} if compared else {}),
                "block_medians": list(self.block_medians),
                "search": j(self.search), "search_agrees": self.search_agrees, "error": self.error or None,
                "tied_with_best": self.tied_with_best, "rank": self.rank, "blocks": self.blocks}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], reference: str, compared: str | None) -> ConfirmedDesign:
        """`to_json`'s record read back, in the same words."""
        return cls(str(d["design_id"]), Ratio.from_json(d.get(f"vs_{reference}")), Ratio.from_json(d.get("warm")),
                   Ratio.from_json(d.get(f"vs_{compared}") if compared else None), tuple(float(x) for x in d.get("block_medians") or ()),
                   Ratio.from_json(d.get("search")), str(d.get("error") or ""), bool(d.get("tied_with_best")),
                   d.get("rank") if isinstance(d.get("rank"), int) else None, int(d.get("blocks") or 0))


def ranked(designs: Sequence[ConfirmedDesign]) -> list[ConfirmedDesign]:
    """Designs by confirmed ratio, best first, with dense ranks: the best and every design
    whose interval reaches its low end share rank 1 (tied, never ranked apart); the fastest
    design left leads rank 2 with every remaining design whose interval reaches its low end,
    and so on, so no rank is skipped. Designs without a confirmed ratio come last, unranked."""
    timed = sorted((d for d in designs if d.vs_reference is not None), key=lambda d: -d.vs_reference.ratio)  # type: ignore[union-attr]
    out: list[ConfirmedDesign] = []
    rank = 0
    lead: Ratio | None = None
    for i, d in enumerate(timed):
        r = d.vs_reference
        assert r is not None
        if lead is None or r.high < lead.low:
            rank, lead = rank + 1, r
        tied = rank == 1 and len(timed) > 1 and (
            i > 0 or timed[1].vs_reference.high >= r.low)  # type: ignore[union-attr]
        out.append(replace(d, tied_with_best=tied, rank=rank))
    out += [replace(d, rank=None) for d in designs if d.vs_reference is None]
    return out
