"""Owns what the harness concluded about one design (`Evaluation`) and the reference timings
it is compared with (`Baseline`): typed views over the verdict, the speedups over each of the
domain's baseline modes (paired over the reference, chained over the others), and the record
the run store keeps. The service (`evaluation/service.py`) produces them."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stratagem.core.design import Design
from stratagem.core.objective import Measured
from stratagem.core.paired import Ratio, Stability, divide
from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict
from stratagem.domains import get_domain

if TYPE_CHECKING:
    from stratagem.store.records import EvaluationRecord, MeasurementRecord


@dataclass(frozen=True)
class Baseline:
    """Reference timings for one problem on one device."""

    problem_id: str
    modes: Mapping[str, Mapping[str, Any]]
    """mode -> timing summary (`median_ms`, ..., `samples_ms`) or `{'error': ...}`."""
    environment: Mapping[str, Any]
    cached: bool
    verdict: Verdict
    """The baseline worker's own results (load, baseline), for error reporting."""
    reference: str
    """The reference's mode (the domain's `BaselineNames.key`): each other mode holds its
    paired ratio over it as `vs_<reference>`."""

    def median_ms(self, mode: str) -> float | None:
        m = self.modes.get(mode) or {}
        v = m.get("median_ms")
        return float(v) if isinstance(v, int | float) else None

    def vs_reference(self, mode: str) -> Ratio | None:
        """The mode's paired speedup over the reference (reference time / mode time)."""
        if mode == self.reference:
            return Ratio(1.0, 1.0, 1.0)
        return Ratio.from_json((self.modes.get(mode) or {}).get(f"vs_{self.reference}"))

    @property
    def reference_ms(self) -> float | None:
        """The reference's median (None: not timed)."""
        return self.median_ms(self.reference)

    def stability(self, mode: str) -> Stability:
        return Stability.from_json((self.modes.get(mode) or {}).get("stability"))

    def fails(self, mode: str) -> str | None:
        """Why the mode's output fails the candidates' correctness rule (None: it passes or
        was not checked)."""
        c = (self.modes.get(mode) or {}).get("correctness")
        if isinstance(c, Mapping) and c.get("ok") is False:
            return str(c.get("reason") or "fails the correctness check")
        return None

    def failing(self) -> dict[str, str]:
        """mode -> why it fails the correctness rule (only the failing ones)."""
        return {m: r for m in self.modes if (r := self.fails(m)) is not None}

    def unstable(self) -> dict[str, tuple[str, ...]]:
        """mode -> the reasons its timing is unstable (only the unstable ones)."""
        out = {}
        for mode in self.modes:
            st = self.stability(mode)
            if not st.stable:
                out[mode] = st.reasons
        return out


@dataclass(frozen=True)
class Evaluation:
    """Everything the harness concluded about one design."""

    problem: Problem
    design: Design
    verdict: Verdict
    device: str
    """Physical device (`cpu`, `cuda:0`)."""
    environment: Mapping[str, Any]
    seeds: tuple[int, ...]
    baseline: Baseline | None
    sandbox: Mapping[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @functools.cached_property
    def measured(self) -> Measured | None:
        """The domain's typed measurement of this evaluation's timing (None: not timed)."""
        return get_domain(self.problem.domain).measure(self.verdict)

    @property
    def timing(self) -> Mapping[str, Any] | None:
        """The design's raw timing summary (`median_ms`, quartiles, samples)."""
        m = self.measured
        return m.stats if m is not None else None

    @property
    def runtime_ms(self) -> float | None:
        m = self.measured
        return m.value if m is not None else None

    @property
    def paired(self) -> Ratio | None:
        """The paired speedup over the reference measured in this evaluation's own worker."""
        m = self.measured
        return m.ratio if m is not None else None

    @property
    def stability(self) -> Stability | None:
        m = self.measured
        return m.stability if m is not None else None

    @property
    def reference_paired_ms(self) -> float | None:
        """The reference's median as timed beside the design, in its worker."""
        m = self.measured
        return m.reference_value if m is not None else None

    @property
    def reference_ms(self) -> dict[str, float | None]:
        """Absolute reference medians from the baseline worker (the run's reference timings);
        without a baseline, the reference as timed beside the design."""
        if self.baseline is not None and self.baseline.modes:
            return {mode: self.baseline.median_ms(mode) for mode in self.baseline.modes}
        paired = self.reference_paired_ms
        return {self.reference_key: paired} if paired is not None else {}

    @functools.cached_property
    def reference_key(self) -> str:
        """The reference's key in `speedups` and `reference_ms` (the domain's)."""
        return get_domain(self.problem.domain).names.key

    @property
    def speedups(self) -> dict[str, Ratio]:
        """Mode -> the design's speedup over it: paired over the reference, chained over the
        other modes the baseline measured."""
        p = self.paired
        if p is None:
            return {}
        out = {self.reference_key: p}
        if self.baseline is not None and self.baseline_matches_device:
            for mode in self.baseline.modes:
                r = self.baseline.vs_reference(mode)
                if mode != self.reference_key and r is not None and r.ratio > 0:
                    out[mode] = divide(p, r)
        return out

    @property
    def baseline_matches_device(self) -> bool:
        """The baseline was measured on a device of the same kind (its name) as this
        evaluation's: only then is a ratio chained through it a speedup over that mode here."""
        if self.baseline is None:
            return False
        mine, theirs = self.environment.get("device_name"), self.baseline.environment.get("device_name")
        return not mine or not theirs or mine == theirs

    @property
    def speedup(self) -> float | None:
        p = self.paired
        return p.ratio if p is not None else None

    def speedups_json(self) -> dict[str, dict[str, Any]]:
        """`speedups` with, for a baseline that fails the correctness rule, `baseline_fails`,
        and for one whose timing stayed unstable after re-timing, `baseline_unstable` (the
        reasons): a ratio chained through it is not a result."""
        out = {}
        unstable = self.baseline.unstable() if self.baseline is not None else {}
        for m, r in self.speedups.items():
            why = self.baseline.fails(m) if self.baseline is not None else None
            extra: dict[str, Any] = {"baseline_fails": why} if why else {}
            if m != self.reference_key and m in unstable:
                extra["baseline_unstable"] = "; ".join(unstable[m])
            out[m] = {**r.to_json(), **extra}
        return out


    def summary(self) -> dict[str, Any]:
        """The `--json` view: verdict, every validator, timings, seeds, environment."""
        v = self.verdict
        return {
            "status": v.status,
            "problem": self.problem.name,
            "problem_id": self.problem.id,
            "domain": self.problem.domain,
            "reference_label": get_domain(self.problem.domain).names.reference,
            "design_id": self.design.id,
            "failures": [{"validator": r.name, "kind": r.kind, "reason": r.reason} for r in v.failures],
            "validators": {
                r.name: {"status": r.outcome, "kind": r.kind, "reason": r.reason,
                         "duration_s": r.duration_s, "details": dict(r.details)}
                for r in v.results
            },
            "runtime_ms": self.runtime_ms,
            "reference_ms": self.reference_ms,
            "reference_paired_ms": self.reference_paired_ms,
            "speedup": self.speedup,
            "speedup_ci": [p.low, p.high] if (p := self.paired) is not None else None,
            "speedups": self.speedups_json(),
            "stability": self.stability.to_json() if self.stability is not None else None,
            "baseline": None if self.baseline is None else {
                "cached": self.baseline.cached,
                "unstable": {m: list(r) for m, r in self.baseline.unstable().items()},
                "fails_correctness": self.baseline.failing(),
                "cost_s": {m: dict(v["cost_s"]) for m, v in self.baseline.modes.items()
                           if isinstance(v, Mapping) and isinstance(v.get("cost_s"), Mapping)},
            },
            "device": self.device,
            "seeds": list(self.seeds),
            "environment": dict(self.environment),
            "sandbox": dict(self.sandbox),
            "wall_s": self.wall_s,
        }

    def to_record(self) -> EvaluationRecord:
        # the store's row shape: loaded where an evaluation is stored
        from stratagem.store.records import EvaluationRecord

        ms: list[MeasurementRecord] = []
        objective = get_domain(self.problem.domain).objective
        if self.timing:  # named and united by the domain's objective (PyTorch: runtime, ms)
            ms.append(_measurement(objective.name, self.timing, objective.unit))
        m = self.measured
        if m is not None and m.reference_stats and "median_ms" in m.reference_stats:
            ms.append(_measurement(f"reference_{self.reference_key}_paired", m.reference_stats))
        if self.baseline is not None:
            for mode, stats in self.baseline.modes.items():
                if "median_ms" in stats:
                    ms.append(_measurement(f"reference_{mode}", stats))
        stab = self.stability
        return EvaluationRecord(
            design_id=self.design.id, problem_id=self.problem.id, status=self.verdict.status,
            device=self.device, runtime_ms=self.runtime_ms, speedup=self.speedup,
            validators=[r.to_json() for r in self.verdict.results], environment=dict(self.environment),
            seeds=list(self.seeds), reference_ms=self.reference_ms, measurements=ms, created_at=time.time(),
            speedups=self.speedups_json(),
            stability=stab.to_json() if stab is not None else {},
        )


def _measurement(name: str, stats: Mapping[str, Any], unit: str = "ms") -> MeasurementRecord:
    from stratagem.store.records import MeasurementRecord

    return MeasurementRecord(
        name=name, unit=unit, median=float(stats["median_ms"]), q1=float(stats["q1_ms"]),
        q3=float(stats["q3_ms"]), samples=[float(x) for x in stats.get("samples_ms", [])],
    )
