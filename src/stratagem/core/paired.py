"""Owns the statistics of paired timing: ratios of interleaved blocks, their bootstrap
interval, chained ratios, and the stability verdict of a timing.

A paired measurement times a reference A and a candidate B in alternating blocks
(A B, B A, A B, ...) in one process, under the same inputs, flush and synchronization. Block
pair p gives the ratio r_p = median(A's samples in p) / median(B's samples in p): how many
times faster B ran than A while both saw the same machine. Load that comes and goes (another
process, clock changes) scales both blocks of a pair alike and cancels in r_p; the reported
speedup is the median of the r_p, and its interval is a percentile bootstrap over the pairs.

Standard library only: the worker (no numpy guaranteed) and the parent both use it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_JUDGED = 6
"""Samples (or pair ratios) below which drift and clusters cannot be judged: such a series
is unstable for want of evidence, never stable by default."""


@dataclass(frozen=True)
class Ratio:
    """A speedup (reference time / candidate time) with its confidence interval."""

    ratio: float
    low: float
    high: float
    pairs: int = 0
    """Block pairs it was measured from (0 for a chained ratio)."""
    chained: bool = False
    """A product of two paired ratios measured in different processes (over a second baseline)."""

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width relative to the ratio (0.05: +-5%)."""
        return (self.high - self.low) / (2 * self.ratio) if self.ratio > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "pairs": self.pairs,
                "chained": self.chained}

    @classmethod
    def from_json(cls, d: Any) -> Ratio | None:
        if not isinstance(d, dict) or not isinstance(d.get("ratio"), int | float):
            return None
        r = float(d["ratio"])
        return cls(r, float(d.get("low", r)), float(d.get("high", r)), int(d.get("pairs", 0)),
                   bool(d.get("chained", False)))


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3) with the inclusive method; one sample gives it three times."""
    xs = sorted(samples)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, med, q3


def pair_ratios(ref_blocks: Sequence[Sequence[float]], cand_blocks: Sequence[Sequence[float]]) -> list[float]:
    """r_p = median(reference block p) / median(candidate block p), for every pair."""
    out = []
    for a, b in zip(ref_blocks, cand_blocks, strict=True):
        ma, mb = statistics.median(a), statistics.median(b)
        if ma > 0 and mb > 0:
            out.append(ma / mb)
    return out


def paired_ratio(
    ref_blocks: Sequence[Sequence[float]], cand_blocks: Sequence[Sequence[float]], seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Ratio:
    """The median pair ratio with a percentile-bootstrap interval over pairs.

    Raises:
        ValueError: no pair has positive times on both sides.
    """
    rs = pair_ratios(ref_blocks, cand_blocks)
    if not rs:
        raise ValueError("no block pair with positive times")
    return bootstrap_median(rs, seed, resamples)


def bootstrap_median(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> Ratio:
    """The median of `values` and its percentile-bootstrap interval (seeded: reproducible)."""
    xs = list(values)
    med = statistics.median(xs)
    if len(xs) == 1:
        return Ratio(med, med, med, 1)
    rng = random.Random(seed)
    n = len(xs)
    boots = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(resamples))
    alpha = (1 - CONFIDENCE) / 2
    lo = boots[int(alpha * (resamples - 1))]
    hi = boots[int(math.ceil((1 - alpha) * (resamples - 1)))]
    return Ratio(med, min(lo, med), max(hi, med), n)


def chain(a: Ratio, b: Ratio) -> Ratio:
    """a x b, for two independent ratios (design/reference x reference/baseline = design/baseline).
    The interval adds the two log half-widths in quadrature."""
    r = a.ratio * b.ratio

    def half(x: Ratio) -> tuple[float, float]:
        if x.ratio <= 0 or x.low <= 0:
            return math.inf, math.inf
        return math.log(x.ratio / x.low), math.log(x.high / x.ratio)

    (al, ah), (bl, bh) = half(a), half(b)
    lo = r / math.exp(math.hypot(al, bl)) if math.isfinite(al + bl) else 0.0
    hi = r * math.exp(math.hypot(ah, bh)) if math.isfinite(ah + bh) else math.inf
    return Ratio(r, lo, hi, 0, chained=True)


def divide(a: Ratio, b: Ratio) -> Ratio:
    """a / b for independent ratios (design/reference over baseline/reference)."""
    inv = Ratio(1 / b.ratio, 1 / b.high if b.high > 0 else 0.0, 1 / b.low if b.low > 0 else math.inf, b.pairs)
    return chain(a, inv)


# -- stability --------------------------------------------------------------------------


@dataclass(frozen=True)
class StabilityRules:
    """Thresholds of the stability verdict (all relative: 0.10 is 10%)."""

    ci_max: float = 0.10
    """A paired ratio whose interval half-width exceeds this fraction of it is unstable."""
    drift_max: float = 0.15
    """Pair ratios of the first and second half of the run differing by more: unstable."""
    cluster_gap: float = 0.25
    """Two groups of values whose medians differ by more than this, each holding at least
    `cluster_share` of the values and separated by a gap wider than their spreads: clusters."""
    cluster_share: float = 0.2
    reference_drift_max: float = 0.5
    """The reference's median this far from the invocation's own earlier measurement of it
    (here +50% / -33%): the machine changed between the two, so chained ratios are unsafe."""
    one_sided_drift_max: float = 0.5
    """One program's raw samples drifting by more than this while the other's hold: the load
    changed for one program only (a longer call preempted more often than a short one), which
    pairing cannot cancel, so the ratio is biased: unstable."""
    spike_factor: float = 10.0
    spike_share: float = 0.05
    """At least `spike_share` of one program's calls taking more than `spike_factor` times its
    median: another process took the machine for whole calls (159 of 1,000 calls at 12-24 ms
    against a 0.1 ms median was seen), which a median hides and pairing does not cancel."""


def stability_rules(raw: Any) -> StabilityRules:
    """The rules of a `stability` settings section (a mapping of the fields above)."""
    return StabilityRules(**{k: float(v) for k, v in dict(raw or {}).items()})


@dataclass(frozen=True)
class Stability:
    """The stability verdict of one timing."""

    stable: bool
    reasons: tuple[str, ...] = ()
    """Why it is unstable (empty when stable)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What was seen that did not decide the verdict (clusters in one program's samples that
    paired blocks cancel, say)."""
    busy: bool = False
    """Not a measurement at all: the machine was busy for too much of the timing (`busy_reason`
    says what was seen); its ratio is never shown or ranked."""

    @property
    def verdict(self) -> str:
        return "busy" if self.busy else "stable" if self.stable else "unstable"

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": list(self.reasons), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: Any) -> Stability:
        if not isinstance(d, dict):
            return cls(True)
        verdict = d.get("verdict", "stable")
        return cls(verdict == "stable", tuple(d.get("reasons") or ()), tuple(d.get("notes") or ()),
                   busy=verdict == "busy")


def busy_reason(guard: Any) -> str | None:
    """`not measured: the machine was busy (...)` for a timing whose busy guard
    (`worker_api.machine_load.BusyGuard.summary`) found too few quiet windows, else None: the
    words every view and the agents show for such a timing."""
    if not isinstance(guard, dict) or not guard.get("busy"):
        return None
    seen = "; ".join(str(s) for s in guard.get("seen") or ()) or "no reading"
    return (f"not measured: the machine was busy ({seen}); {guard.get('measured')} of "
            f"{guard.get('wanted')} timed in quiet windows, after {guard.get('waited_s')} s of waiting "
            f"(limit: timing.busy.wait_s = {guard.get('limit_s')})")


def voided_note(guard: Any) -> str | None:
    """A note for a timing that voided busy windows and still measured enough."""
    if not isinstance(guard, dict) or guard.get("busy") or not guard.get("void_windows"):
        return None
    seen = "; ".join(str(s) for s in guard.get("seen") or ())
    return (f"{guard['void_windows']} of {guard.get('windows')} timing windows were void and timed again "
            f"(the machine was busy: {seen})")


def clusters(values: Sequence[float], rules: StabilityRules = StabilityRules()) -> str | None:
    """A description of two clusters in `values` (log scale), or None.

    Sorted values are split at every point leaving at least `cluster_share` on each side; a
    split is a cluster boundary when the upper group's median exceeds the lower's by more than
    `cluster_gap` and the gap between the groups is wider than either group's own
    interquartile range (so a smooth long tail is not called two clusters)."""
    xs = sorted(math.log(v) for v in values if v > 0)
    n = len(xs)
    k0 = max(2, math.ceil(rules.cluster_share * n))
    if n < 2 * k0:
        return None
    best: tuple[float, int] | None = None
    for k in range(k0, n - k0 + 1):
        gap = xs[k] - xs[k - 1]
        if best is None or gap > best[0]:
            best = (gap, k)
    assert best is not None
    gap, k = best
    lo, hi = xs[:k], xs[k:]
    spread = max(_iqr(lo), _iqr(hi))
    ratio = math.exp(statistics.median(hi) - statistics.median(lo))
    if ratio - 1 > rules.cluster_gap and gap > spread:
        return (f"samples fall into two clusters: {k} near {math.exp(statistics.median(lo)):.4g} and "
                f"{n - k} near {math.exp(statistics.median(hi)):.4g} ({ratio:.2f}x apart)")
    return None


def drift(values: Sequence[float], limit: float) -> str | None:
    """A description of a level change between the first and the second half, or None."""
    n = len(values)
    if n < MIN_JUDGED:
        return None
    a, b = statistics.median(values[: n // 2]), statistics.median(values[n // 2:])
    if a <= 0 or b <= 0:
        return None
    change = max(a, b) / min(a, b) - 1
    if change > limit:
        return f"the first half's median {a:.4g} and the second half's {b:.4g} differ by {change:.0%}"
    return None


def _iqr(xs: Sequence[float]) -> float:
    if len(xs) < 4:
        return max(xs) - min(xs) if xs else 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[2] - q[0]


def spikes(values: Sequence[float], rules: StabilityRules = StabilityRules()) -> str | None:
    """A description of calls far slower than the median (`spike_factor` times), when at least
    `spike_share` of them are; or None."""
    xs = [v for v in values if v > 0]
    if len(xs) < MIN_JUDGED:
        return None
    med = statistics.median(xs)
    slow = sorted(v for v in xs if v > rules.spike_factor * med)
    if not slow or len(slow) < rules.spike_share * len(xs):
        return None
    return (f"{len(slow)} of {len(xs)} calls took {slow[0]:.4g}-{slow[-1]:.4g} ms, over "
            f"{rules.spike_factor:g}x the median {med:.4g} ms (limit: {rules.spike_share:.0%} of the calls)")


def _sample_verdict(who: str, samples: Sequence[float], rules: StabilityRules) -> tuple[list[str], list[str]]:
    """(reasons, notes) from one program's raw samples: spikes and drift beyond `drift_max`
    decide (a machine whose load changed under the timing, or took whole calls, is not one to
    rank on, whatever pairing cancels); clusters are notes."""
    reasons, notes = [], []
    sp = spikes(samples, rules)
    if sp:
        reasons.append(f"spikes: {who} {sp}")
    d = drift(samples, rules.drift_max)
    if d:
        reasons.append(f"{who} drift: {d} (limit {rules.drift_max:.0%})")
    c = clusters(samples, rules)
    if c:
        notes.append(f"{who} {c}")
    return reasons, notes


def paired_stability(
    ratio: Ratio,
    ratios: Sequence[float],
    ref_samples: Sequence[float],
    cand_samples: Sequence[float],
    rules: StabilityRules = StabilityRules(),
    reference_expect_ms: float | None = None,
    busy: Any = None,
) -> Stability:
    """The verdict of a paired measurement (`busy`: the timing's busy-guard summary; a timing
    with too few quiet windows is `busy`, not a measurement). It decides on the ratio: a wide interval, pair
    ratios that drift or cluster, a reference far from the invocation's own earlier
    measurement, one program's samples drifting far while the other's hold; and on what the
    machine did: either program's samples drifting beyond `drift_max`, or spiking (a share of
    calls an order of magnitude above the median). Clusters in one program's raw samples are
    notes: pairing cancels what both programs saw."""
    gone = busy_reason(busy)
    if gone is not None:
        return Stability(False, (gone,), busy=True)
    reasons: list[str] = []
    if len(ratios) < MIN_JUDGED:
        reasons.append(_too_few(len(ratios), "pair ratios", "`timing.pairs`"))
    if ratio.rel_halfwidth > rules.ci_max:
        reasons.append(f"ratio spread: the {CONFIDENCE:.0%} interval [{ratio.low:.3g}, {ratio.high:.3g}] "
                       f"is +-{ratio.rel_halfwidth:.0%} of {ratio.ratio:.3g} (limit +-{rules.ci_max:.0%})")
    d = drift(ratios, rules.drift_max)
    if d:
        reasons.append("ratio drift: " + d)
    c = clusters(ratios, rules)
    if c:
        reasons.append("ratio clusters: " + c.replace("samples", "pair ratios"))
    if reference_expect_ms:
        ref = statistics.median(ref_samples)
        off = max(ref, reference_expect_ms) / max(min(ref, reference_expect_ms), 1e-12) - 1
        if off > rules.reference_drift_max:
            reasons.append(f"reference drift: the reference timed {ref:.4g} ms here and "
                           f"{reference_expect_ms:.4g} ms earlier in this invocation ({off:.0%} apart)")
    one_ref = drift(ref_samples, rules.one_sided_drift_max)
    one_cand = drift(cand_samples, rules.one_sided_drift_max)
    if (one_ref is None) != (one_cand is None):
        who, what = ("the reference", one_ref) if one_ref else ("the candidate", one_cand)
        reasons.append(f"one-sided drift: {who}'s samples drifted ({what}) while the other's held: the load "
                       "changed for one program only, which pairing cannot cancel")
    notes: list[str] = []
    for who, samples in (("the reference", ref_samples), ("the candidate", cand_samples)):
        r, n = _sample_verdict(who, samples, rules)
        one_sided = any(x.startswith("one-sided drift: " + who) for x in reasons)
        reasons += [x for x in r if not (one_sided and " drift: " in x)]  # said once, as one-sided
        notes += n
    notes += [x for x in [voided_note(busy)] if x]
    return Stability(not reasons, tuple(reasons), tuple(notes))


# -- sequential stopping ------------------------------------------------------------------


def looks(first: int, most: int, least: int = MIN_JUDGED) -> list[int]:
    """The pair counts at which a timing may stop early: `first` (at least `least`), then
    doubling, below `most` (reaching `most` ends it anyway). Few looks, spaced geometrically,
    keep what looking repeatedly does to the interval small (each look is one more chance to
    stop on a narrow-looking interval). A confirmation round looks at its block counts the same
    way (`least` 2: an interval between processes needs two)."""
    out, n = [], max(first, least)
    while n < most:
        out.append(n)
        n *= 2
    return out


def settled(
    ratios: Sequence[float],
    ref_samples: Sequence[float],
    cand_samples: Sequence[float],
    rules: StabilityRules,
    target: float,
    reference_expect_ms: float | None = None,
) -> Ratio | None:
    """The stop rule of a sequential paired timing (docs/timing.md, "Stopping early"): the
    pairs so far are enough when there are at least `MIN_JUDGED` of them, the ratio's interval
    half-width is at most `target` of the ratio, and every stability check passes on them (the
    verdict the full timing would be judged by). Returns that ratio, or None: go on. A `target`
    of 0 never stops early."""
    if target <= 0 or len(ratios) < MIN_JUDGED:
        return None
    r = bootstrap_median(ratios, seed=len(ratios))
    if r.rel_halfwidth > target:
        return None
    if not paired_stability(r, ratios, ref_samples, cand_samples, rules, reference_expect_ms).stable:
        return None
    return r


def _too_few(n: int, what: str, knob: str) -> str:
    return (f"too few to judge: {n} {what}, and drift or clusters need at least {MIN_JUDGED} "
            f"(raise {knob})")


def single_stability(samples: Sequence[float], rules: StabilityRules = StabilityRules(),
                     reference_expect_ms: float | None = None, busy: Any = None) -> Stability:
    """The verdict of one program timed alone: clusters or drift in its samples (too few
    samples to tell is unstable too; too few quiet windows is `busy`)."""
    gone = busy_reason(busy)
    if gone is not None:
        return Stability(False, (gone,), busy=True)
    reasons, notes = _sample_verdict("the program", samples, rules)
    notes += [x for x in [voided_note(busy)] if x]
    if len(samples) < MIN_JUDGED:
        reasons.insert(0, _too_few(len(samples), "timed calls", "`timing.min_reps` or `timing.budget_ms`"))
    if reference_expect_ms:
        med = statistics.median(samples)
        off = max(med, reference_expect_ms) / max(min(med, reference_expect_ms), 1e-12) - 1
        if off > rules.reference_drift_max:
            reasons.append(f"reference drift: {med:.4g} ms now, {reference_expect_ms:.4g} ms earlier ({off:.0%} apart)")
    return Stability(not reasons, tuple(reasons), tuple(notes))
