"""Owns what a run shows while it goes on: the live view's protocol (`RunView`) and the snapshot
it draws (`Progress`: the iteration, the designs by the one count every view uses, the best so
far, the spend, the last events, the evaluations in flight: `core/inflight.py`). The Session
fills them; `report/live.py` draws them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from stratagem.core.inflight import InFlight
from stratagem.search.budget import Spend
from stratagem.search.numbers import Counts
from stratagem.search.numbers import counts as counts_of

__all__ = ["Progress", "RunView"]


class RunView(Protocol):
    """Where the loop reports progress (the rich live view, or nothing)."""

    def update(self, snapshot: Progress) -> None: ...


@dataclass
class Progress:
    """What the live view shows."""

    problem: str
    policy: str
    iteration: int = 0
    iterations: int = 0
    strategy: str = ""
    workers: dict[str, str] = field(default_factory=dict)
    counts: Counts = field(default_factory=lambda: counts_of(()))
    """The designs by the one definition every view uses (`search/numbers.py`)."""
    best_speedup: float | None = None
    best_id: str | None = None
    best_text: str = "-"
    """The best design's paired speedup as everywhere else (`1.23x [1.20, 1.26]`)."""
    spend: Spend = field(default_factory=Spend)
    events: list[str] = field(default_factory=list)
    inflight: dict[str, InFlight] = field(default_factory=dict)
    """Evaluations running now, by design id (short)."""

    def event(self, text: str) -> None:
        self.events = (self.events + [f"{time.strftime('%H:%M:%S')} {text}"])[-8:]
