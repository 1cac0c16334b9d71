"""`stratagem compare` shows the tuning of the runs compared (issue 27, item 4): the points tried,
the best point and its parameters, and, in a run mixing designs written by agents with tuned
points, where the best came from (`tune.shares`, as the report's Tuning section says it)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes import FakeEvaluator, src
from test_tune import make, write

from stratagem.cli import main
from stratagem.core.search import IterationResult, SearchState, Session
from stratagem.report.compare import compare_runs, tuning_table
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.tune import TunePolicy
from stratagem.search.session import RunSession


class WrittenThenTuned:
    """Iteration 1: an agent's design at `ms` (the fake evaluator's eager takes 1 ms); then the
    tune policy's points."""

    name = "tune"

    def __init__(self, tune: TunePolicy, ms: float) -> None:
        self.tune, self.ms = tune, ms

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        if state.iteration == 1:
            fb = await session.evaluate(src("written", self.ms), strategy="innovate", author="implementor-1")
            return IterationResult(plan=None, design_ids=(fb.design_id,))
        return await self.tune.iterate(state, session)

    async def review(self, design, state, session):
        return None


def study(tmp_path: Path, name: str, iterations: int, written_ms: float | None = None) -> Path:
    cfg, problem, policy, store = make(tmp_path, write(tmp_path), iterations, run=name)
    chosen = policy if written_ms is None else WrittenThenTuned(policy, written_ms)
    try:
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), chosen)).run())  # type: ignore[arg-type]
    finally:
        store.close()
    return tmp_path / name


def test_compare_shows_each_runs_tuning_and_where_the_best_came_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tuned = study(tmp_path, "tuned", 6)
    mixed = study(tmp_path, "mixed", 6, written_ms=0.4)  # the agent's 2.5x beats every point (2.0x at best)
    cmp = compare_runs([tuned, mixed])
    a, b = cmp.curves
    assert a.tuning is not None and len(a.tuning.points) == 6 and a.shares is None
    assert b.tuning is not None and len(b.tuning.points) == 5 and b.shares is not None
    sh = b.shares
    assert not sh.from_tuner and sh.best_author == "implementor-1" and sh.written == 1 and sh.tuned == 5
    assert sh.best_speedup == pytest.approx(2.5)
    assert sh.tuned_best is not None and sh.tuned_best.speedup is not None  # seeded: the study is the same each time
    factor = sh.tuner_factor
    assert factor is not None and factor == pytest.approx(sh.tuned_best.speedup / 2.5) and factor < 1
    data = json.loads(json.dumps(cmp.to_json()))
    ta, tb = data["runs"][0]["tuning"], data["runs"][1]["tuning"]
    assert ta["points_tried"] == 6 and a.tuning.best is not None and ta["best"]["params"] == a.tuning.best.point
    assert set(ta["best"]["params"]) == {"MS", "BLOCK", "MODE"} and ta["shares"] is None
    assert tb["shares"]["from_tuner"] is False and tb["shares"]["written_best"]["author"] == "implementor-1"
    assert tuning_table(cmp) is not None
    assert main(["compare", str(tuned), str(mixed), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "tuning (docs/tune.md)" in out and "implementor-1" in out and "MS=" in out


def test_a_run_without_tuning_has_no_tuning_table(tmp_path: Path) -> None:
    cfg, problem, _, store = make(tmp_path, write(tmp_path), 1, run="plain")

    class Written:
        name = "written"

        async def iterate(self, state, session):
            fb = await session.evaluate(src("w", 0.5), strategy="innovate", author="implementor-1")
            return IterationResult(plan=None, design_ids=(fb.design_id,), exhausted=True)

        async def review(self, design, state, session):
            return None

    try:
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), Written())).run())  # type: ignore[arg-type]
    finally:
        store.close()
    cmp = compare_runs([tmp_path / "plain"])
    assert cmp.curves[0].tuning is None and tuning_table(cmp) is None
    assert cmp.to_json()["runs"][0]["tuning"] is None
