"""Owns the statistics of a confirmation round: each design's ratio over the reference from
several independent timing blocks (one process each), with an interval that covers the spread
between blocks and not only within them; ratios over the baseline the domain sets beside the
reference (`BaselineNames.compared`), measured in the same blocks; and which designs are tied
with the best.

Standard library only.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stratagem.core.paired import BOOTSTRAP_RESAMPLES, CONFIDENCE, Ratio

REFERENCE_JSON = "vs_eager"
COMPARED_JSON = "vs_compile"
"""The keys of a confirmed design's two ratios in its JSON (stored rounds, `show --json`'s
`confirmed`): the first domain's words, kept so stored rounds read as written."""


def between_blocks(blocks: Sequence[Sequence[float]], seed: int = 0,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> Ratio | None:
    """The median of every block's pair ratios, with a two-level percentile bootstrap (blocks
    drawn with replacement, then pair ratios within each drawn block), widened to hold every
    block's own median: the variance between independent processes is in it, which a
    bootstrap over one process's pairs never sees. None when no block has a ratio."""
    kept = [list(b) for b in blocks if b]
    if not kept:
        return None
    pooled = [x for b in kept for x in b]
    point = statistics.median(pooled)
    medians = [statistics.median(b) for b in kept]
    rng = random.Random(seed)
    boots = []
    for _ in range(resamples):
        drawn = [rng.choice(kept) for _ in kept]
        boots.append(statistics.median([x for b in drawn for x in rng.choices(b, k=len(b))]))
    boots.sort()
    alpha = (1 - CONFIDENCE) / 2
    lo = boots[int(alpha * (resamples - 1))]
    hi = boots[int(math.ceil((1 - alpha) * (resamples - 1)))]
    return Ratio(point, min(lo, point, *medians), max(hi, point, *medians), len(pooled))


def per_block(values: Sequence[float]) -> Ratio | None:
    """A ratio known once per block (a design over the compared baseline, both paired with the
    reference in that block): the median, and the range of the blocks as its interval."""
    xs = [v for v in values if v > 0 and math.isfinite(v)]
    if not xs:
        return None
    return Ratio(statistics.median(xs), min(xs), max(xs), len(xs))


@dataclass(frozen=True)
class ConfirmedDesign:
    """One design's confirmed numbers (stored as `to_json`, under the keys the first domain's
    rounds wrote: `vs_eager` for the reference, `vs_compile` for the compared baseline)."""

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
    """1-based; designs tied with the best share rank 1."""

    @property
    def search_holds(self) -> bool | None:
        """Whether the search-time interval holds the confirmed ratio (None: either unknown)."""
        if self.search is None or self.vs_reference is None:
            return None
        return self.search.low <= self.vs_reference.ratio <= self.search.high

    def to_json(self) -> dict[str, Any]:
        def j(r: Ratio | None) -> dict[str, Any] | None:
            return r.to_json() if r is not None else None

        return {"design_id": self.design_id, REFERENCE_JSON: j(self.vs_reference), "warm": j(self.warm),
                COMPARED_JSON: j(self.vs_compared), "block_medians": list(self.block_medians),
                "search": j(self.search), "search_holds": self.search_holds, "error": self.error or None,
                "tied_with_best": self.tied_with_best, "rank": self.rank}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConfirmedDesign:
        return cls(str(d["design_id"]), Ratio.from_json(d.get(REFERENCE_JSON)), Ratio.from_json(d.get("warm")),
                   Ratio.from_json(d.get(COMPARED_JSON)), tuple(float(x) for x in d.get("block_medians") or ()),
                   Ratio.from_json(d.get("search")), str(d.get("error") or ""), bool(d.get("tied_with_best")),
                   d.get("rank") if isinstance(d.get("rank"), int) else None)


def ranked(designs: Sequence[ConfirmedDesign]) -> list[ConfirmedDesign]:
    """Designs by confirmed ratio, best first, each with its rank; a design whose interval
    overlaps the best's is tied with it (rank 1), never ranked apart from it. Designs without a
    confirmed ratio come last, unranked."""
    timed = sorted((d for d in designs if d.vs_reference is not None), key=lambda d: -d.vs_reference.ratio)  # type: ignore[union-attr]
    out: list[ConfirmedDesign] = []
    best = timed[0].vs_reference if timed else None
    rank = 1
    ties = [i > 0 and d.vs_reference.high >= best.low for i, d in enumerate(timed)]  # type: ignore[union-attr]
    for i, d in enumerate(timed):
        assert d.vs_reference is not None and best is not None
        tied = ties[i] or (i == 0 and any(ties))
        if not (i == 0 or ties[i]):
            rank = max(rank, i + 1)
        out.append(replace(d, tied_with_best=tied, rank=1 if (i == 0 or ties[i]) else rank))
    out += [replace(d, rank=None) for d in designs if d.vs_reference is None]
    return out
