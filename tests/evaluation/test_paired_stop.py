"""Paired timing that stops once its interval is as tight as the verdict needs, on scripted
block times (no wall time is asserted): where it stops, that it never stops before its first
look, that a noisy timing runs its planned pairs, and that the timed calls kept for the
outputs check are drawn from the blocks it ran."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import pytest

from stratagem.domains.pytorch.settings import TimingConfig
from stratagem.domains.pytorch.worker import timing

PLANNED = 40


class Scripted:
    """Block times per program: `ratio(p)` the true reference/candidate ratio of pair p, with
    `noise` (relative) on every call; the candidate's calls that reached `keep` are counted."""

    def __init__(self, ratio: Any, noise: float, seed: int = 0) -> None:
        self.ratio, self.noise, self.rng = ratio, noise, random.Random(seed)
        self.calls = {"reference": 0, "candidate": 0}

    def block(self, fn: Any, arg_sets: Any, n: int, device: str, flush: Any, fresh: Any, start: int,
              keep: Any = None) -> tuple[list[float], list[float], list[float]]:
        who = fn.__name__
        pair = self.calls[who] // n
        self.calls[who] += n
        base = 2.0 if who == "reference" else 2.0 / self.ratio(pair)
        times = [base * math.exp(self.rng.gauss(0, self.noise)) for _ in range(n)]
        if keep is not None:
            for i in keep[0]:
                keep[1](i, ("out", start + i), ())
        return times, [], []


def reference() -> None: ...
def candidate() -> None: ...


def _time(monkeypatch: pytest.MonkeyPatch, script: Scripted, target: float = 0.02, keep: Any = None,
          keep_count: int = 0) -> dict[str, Any]:
    monkeypatch.setattr(timing, "_block", script.block)
    monkeypatch.setattr(timing, "_estimate_ms", lambda *a, **k: (1.0, 3))
    cfg = {**TimingConfig().model_dump(), "pairs": PLANNED, "target_halfwidth": target}
    cfg["busy"] = {**cfg["busy"], "enabled": False}
    return timing.time_paired(reference, candidate, [[]], cfg, "cpu", None, keep=keep, keep_count=keep_count)


def test_a_steady_timing_stops_at_its_first_look(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _time(monkeypatch, Scripted(lambda p: 2.0, 0.003))
    assert st["stop"] == "settled" and st["pairs"] == timing.PAIRS_MIN and st["planned_pairs"] == PLANNED
    assert st["speedup"]["low"] <= 2.0 <= st["speedup"]["high"]
    assert not st["busy"]["busy"]  # fewer pairs than planned, by the rule: a measurement


def test_a_noisy_timing_runs_its_planned_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _time(monkeypatch, Scripted(lambda p: 2.0, 0.4))
    assert st["stop"] == "planned" and st["pairs"] == PLANNED


def test_a_timing_noisy_at_first_stops_at_a_later_look(monkeypatch: pytest.MonkeyPatch) -> None:
    # the first pairs are wide (as a first look on a machine settling down), the later ones tight
    st = _time(monkeypatch, Scripted(lambda p: 2.0 * (1.3 if p % 2 else 0.75) if p < 4 else 2.0, 0.002))
    assert st["stop"] == "settled" and st["pairs"] == 2 * timing.PAIRS_MIN


def test_target_zero_runs_every_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _time(monkeypatch, Scripted(lambda p: 2.0, 0.003), target=0.0)
    assert st["stop"] == "planned" and st["pairs"] == PLANNED


def test_kept_timed_calls_come_from_the_blocks_the_timing_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: dict[int, int] = {}
    script = Scripted(lambda p: 2.0, 0.003)
    st = _time(monkeypatch, script, keep=lambda slot, i, out, args: kept.__setitem__(slot, i), keep_count=3)
    assert st["stop"] == "settled"
    assert sorted(kept) == [0, 1, 2]  # every slot filled
    assert all(i < script.calls["candidate"] + script.calls["reference"] for i in kept.values())


def test_the_kept_blocks_are_a_uniform_draw_whenever_the_timing_stops() -> None:
    # reservoir sampling: over many timings stopped after T blocks, each block is kept k/T of the time
    rng, k, stops = random.Random(5), 3, (10, 20, 40)
    for t in stops:
        hits: Counter[int] = Counter()
        runs = 6000
        for _ in range(runs):
            slots: dict[int, int] = {}
            for b in range(t):
                s = timing._kept_slot(b, k, rng)  # type: ignore[arg-type]
                if s is not None:
                    slots[s] = b
            assert len(slots) == k
            hits.update(slots.values())
        expected = runs * k / t
        assert all(abs(hits[b] - expected) < 0.2 * expected for b in range(t)), (t, hits)
