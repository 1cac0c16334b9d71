"""The sequential stop rule of paired timing on scripted pair-ratio streams: when a timing may
stop before its planned pairs, and when it must go on (too few pairs, a wide interval, any
stability check failing)."""

from __future__ import annotations

import math
import random

from stratagem.core import paired
from stratagem.core.paired import StabilityRules

RULES = StabilityRules()


def _noisy(center: float, n: int, rel: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [center * math.exp(rng.gauss(0, rel)) for _ in range(n)]


def _stream(ratios: list[float], ref_ms: float = 2.0) -> tuple[list[float], list[float], list[float]]:
    """(ratios, reference samples, candidate samples) of one call per block."""
    return ratios, [ref_ms] * len(ratios), [ref_ms / r for r in ratios]


def test_looks_start_at_the_first_count_and_double_below_the_planned_pairs() -> None:
    assert paired.looks(10, 40) == [10, 20]
    assert paired.looks(10, 80) == [10, 20, 40]
    assert paired.looks(10, 10) == []  # a timing planned at the floor runs every pair
    assert paired.looks(6, 12) == [6]
    assert paired.looks(2, 40)[0] == paired.MIN_JUDGED  # never before the stability checks can judge


def test_a_tight_stable_stream_settles_with_its_ratio() -> None:
    r = paired.settled(*_stream(_noisy(2.0, 10, 0.005, 1)), RULES, 0.02)
    assert r is not None and abs(r.ratio - 2.0) < 0.02 and r.rel_halfwidth <= 0.02 and r.pairs == 10


def test_too_few_pairs_never_settle() -> None:
    assert paired.settled(*_stream([2.0] * (paired.MIN_JUDGED - 1)), RULES, 0.02) is None


def test_a_wide_interval_goes_on() -> None:
    ratios = _noisy(2.0, 10, 0.05, 2)
    r = paired.bootstrap_median(ratios, seed=len(ratios))
    assert 0.02 < r.rel_halfwidth < RULES.ci_max  # the stream really is wide, yet stable
    assert paired.settled(*_stream(ratios), RULES, 0.02) is None
    assert paired.settled(*_stream(ratios), RULES, r.rel_halfwidth) is not None  # ... and only that stops it


def test_a_tight_interval_that_fails_a_stability_check_goes_on() -> None:
    # the reference far from its earlier quiet time: reference drift
    steady = _noisy(2.0, 10, 0.002, 3)
    assert paired.settled(*_stream(steady), RULES, 0.02) is not None
    assert paired.settled(*_stream(steady), RULES, 0.02, reference_expect_ms=0.5) is None
    # one program's samples drifting while the other's hold (spikes, drift): the samples decide too
    ref = [2.0] * 5 + [3.5] * 5
    assert paired.settled(steady, ref, [a / r for a, r in zip(ref, steady, strict=True)], RULES, 0.02) is None


def test_a_target_of_zero_never_stops_early() -> None:
    assert paired.settled(*_stream([2.0] * 40), RULES, 0.0) is None
