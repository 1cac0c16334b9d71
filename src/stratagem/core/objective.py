"""Owns objectives and measurements: what is optimised, in which unit, and what was measured."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stratagem.core.paired import Ratio, Stability, quartiles


@dataclass(frozen=True)
class Objective:
    """A scalar to optimise."""

    name: str = "runtime"
    unit: str = "ms"
    direction: Literal["minimize", "maximize"] = "minimize"


@dataclass(frozen=True)
class Measured:
    """A design's measurement as a domain reports it: the objective's value and, measured side
    by side with the reference, the improvement ratio over it (> 1 is better, whatever the
    objective's direction) with its interval and stability verdict."""

    value: float
    """The objective's value for the design (PyTorch: its median runtime in ms)."""
    reference_value: float | None
    """The reference's value measured beside it."""
    ratio: Ratio | None
    """The paired improvement over the reference (for a time objective: the reference's time / the design's)."""
    stability: Stability | None
    stats: dict[str, Any]
    """The design's raw summary (`median_ms`, `q1_ms`, `q3_ms`, `samples_ms`, ...)."""
    reference_stats: dict[str, Any] | None = None


@dataclass(frozen=True)
class Measurement:
    """Summary statistics of raw samples, with the samples kept."""

    name: str
    """What was measured (`runtime`, `reference_<mode>`)."""
    unit: str
    """Unit of the values (`ms`)."""
    median: float
    q1: float
    q3: float
    samples: tuple[float, ...]
    """Every raw sample, unrounded."""

    @property
    def n(self) -> int:
        return len(self.samples)

    @classmethod
    def of(cls, name: str, unit: str, samples: Sequence[float]) -> Measurement:
        if not samples:
            raise ValueError("a measurement needs at least one sample")
        q1, med, q3 = quartiles(samples)
        return cls(name=name, unit=unit, median=med, q1=q1, q3=q3, samples=tuple(samples))

