"""Progress inside an evaluation: the stage as it starts, elapsed time and an estimate."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console

from stratagem.core.design import Design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.report.live import LiveView
from stratagem.search.loop import InFlight, Progress

PAIRED = Path(__file__).resolve().parents[1] / "fixtures" / "paired"


def test_the_evaluator_reports_each_stage_as_it_starts(cpu_config) -> None:
    heard: list[str] = []
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"})
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(
        load_problem(PAIRED / "problem.py"), Design.from_source((PAIRED / "same.py").read_text()),
        with_baseline=False, on_stage=heard.append))
    assert ev.verdict.status == "valid"
    ran = [r.name for r in ev.verdict.results]  # every validator, in the order it ran
    expected = [*ran[: ran.index("timing") + 1], "judge", *ran[ran.index("timing") + 1:]]
    assert [s for s in heard if s in expected] == expected, heard


def test_an_evaluation_in_flight_shows_its_stage_elapsed_time_and_estimate() -> None:
    f = InFlight("abc123 (recipe:compile)", "timing", started=100.0, expect_s=60.0)
    assert f.line(130.0) == "abc123 (recipe:compile): timing (30 s, about 30 s left)"
    assert f.line(190.0).endswith("(90 s, longer than usual)")
    assert InFlight("x", "load", 0.0).line(5.0) == "x: load (5 s)"  # no estimate before one finished


def test_the_view_on_a_pipe_prints_each_stage_change_once() -> None:
    out = io.StringIO()
    view = LiveView(Console(file=out, width=120, force_terminal=False))
    p = Progress(problem="p", policy="recipes")
    p.inflight["abc"] = InFlight("abc (recipe:compile)", "load", started=0.0)
    view.update(p)
    view.update(p)
    p.inflight["abc"].stage = "timing"
    view.update(p)
    lines = [ln for ln in out.getvalue().splitlines() if "abc (recipe:compile)" in ln]
    assert len(lines) == 2 and ": load (" in lines[0] and ": timing (" in lines[1]


def test_the_header_counts_the_iterations_a_policy_will_run() -> None:
    from fakes import FakeEvaluator

    from stratagem.config import load_config
    from stratagem.domains.pytorch.problem import load_problem
    from stratagem.domains.pytorch.recipes.policy import RecipesPolicy
    from stratagem.search.loop import SearchLoop
    from stratagem.store.sqlite import RunStore

    problem = load_problem(Path(__file__).resolve().parents[1] / "fixtures" / "problem_relu.py")
    cfg = load_config(None, {"search": {"iterations": 10}})
    import tempfile

    with RunStore.open(Path(tempfile.mkdtemp()) / "r") as store:
        loop = SearchLoop(cfg, problem, store, FakeEvaluator(), RecipesPolicy.from_config(cfg, on_gpu=False))  # type: ignore[arg-type]
        assert loop.progress.iterations == 2  # singles, then their combination: not "1/10"
