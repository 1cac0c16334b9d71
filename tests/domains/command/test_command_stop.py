"""A command problem's timing with as few runs as its stability allows, on scripted run times
(no process is started, no wall time asserted): it stops after the first look when the pairs
are tight and stable, runs its whole budget when they are not, and the interval it stops with
holds the true ratio as often as the full budget's does."""

from __future__ import annotations

import contextlib
import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

from stratagem.core import paired
from stratagem.domains.command import timing as ctiming
from stratagem.domains.command.spec import TimingSpec

TRUE_RATIO = 3.0


def _ctx(target: float = 0.02, pairs: int = 6, runs: int = 2) -> Any:
    spec = SimpleNamespace(timing=TimingSpec(pairs=pairs, runs=runs, target_halfwidth=target),
                           compare=SimpleNamespace(mode="json"))
    return SimpleNamespace(spec=spec, programs=("reference", "design"),
                           use=SimpleNamespace(hold=lambda mode: contextlib.nullcontext()))


def _script(monkeypatch: pytest.MonkeyPatch, noise: float, seed: int) -> dict[str, int]:
    """Runs of 1 s for the reference and 1/3 s for the design, with `noise` on each; counts them."""
    rng = random.Random(seed)
    runs = {"reference": 0, "design": 0}

    def timed(ctx: Any, who: str, values: Any, expected: Any) -> tuple[dict[str, float], float]:
        runs[who] += 1
        ms = (1000.0 if who == "reference" else 1000.0 / TRUE_RATIO) * math.exp(rng.gauss(0, noise))
        return {ctiming.SUMMARY: ms}, ms + 5.0

    monkeypatch.setattr(ctiming, "_timed", timed)
    return runs


def _interval(t: dict[str, Any]) -> paired.Ratio:
    ref = ctiming._series(t["blocks"]["reference"], ctiming.SUMMARY)
    des = ctiming._series(t["blocks"]["design"], ctiming.SUMMARY)
    return paired.paired_ratio(ref, des)


def test_a_steady_problem_stops_after_six_pairs_of_single_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _script(monkeypatch, 0.005, 1)
    t = ctiming._pairs(_ctx(), {}, None, None)
    assert t["stop"] == "settled" and runs == {"reference": 6, "design": 6}  # 24 runs before, 12 now
    assert abs(_interval(t).ratio / TRUE_RATIO - 1) < 0.02


def test_a_noisy_problem_runs_its_whole_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _script(monkeypatch, 0.2, 2)
    t = ctiming._pairs(_ctx(), {}, None, None)
    assert t["stop"] == "planned" and runs == {"reference": 12, "design": 12}  # pairs x runs each, as before


def test_target_zero_runs_the_whole_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _script(monkeypatch, 0.005, 3)
    ctiming._pairs(_ctx(target=0.0), {}, None, None)
    assert runs == {"reference": 12, "design": 12}


def test_intervals_of_stopped_timings_hold_as_often_as_full_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    held = {"stopped": 0, "full": 0}
    trials, stopped = 60, 0
    for seed in range(trials):
        for mode, target in (("stopped", 0.02), ("full", 0.0)):
            _script(monkeypatch, 0.01, 100 + seed)
            t = ctiming._pairs(_ctx(target=target), {}, None, None)
            stopped += mode == "stopped" and t["stop"] == "settled"
            r = _interval(t)
            held[mode] += r.low <= TRUE_RATIO <= r.high
    assert stopped > trials // 2  # the rule saves runs on most of these timings
    assert held["stopped"] >= held["full"] - 0.05 * trials, held  # and costs no coverage beyond noise
