"""Owns an evaluation in flight as the live views show it (`InFlight`: its stage, elapsed and
expected time). A run's Session fills one per evaluation; `eval` and `baseline` one for
theirs (`report/live.py`'s `stage_view`). Standard library only: one evaluation's view loads
nothing of the search."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class InFlight:
    """An evaluation (or baseline measurement) in progress, as the live view shows it."""

    label: str
    stage: str
    started: float
    """time.time() at its start."""
    expect_s: float | None = None
    """How long one takes here (the median of this invocation's finished ones), when known."""
    stage_since: float | None = None
    """time.time() when `stage` began."""

    def line(self, now: float) -> str:
        elapsed = now - self.started
        eta = ""
        if "waiting for the timing lock" in self.stage:  # a wait is not a slow load: said as such
            eta = f", waiting for {now - (self.stage_since or self.started):.0f} s"
        elif self.expect_s is not None:
            left = self.expect_s - elapsed
            eta = f", about {left:.0f} s left" if left > 0 else ", longer than usual"
        return f"{self.label}: {self.stage} ({elapsed:.0f} s{eta})"
