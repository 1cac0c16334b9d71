"""Progress inside an evaluation: the stage as it starts, elapsed time and an estimate."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

from rich.console import Console

from stratagem.domains.pytorch.domain import candidate_design
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
        load_problem(PAIRED / "problem.py"), candidate_design((PAIRED / "same.py").read_text()),
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
    view = LiveView(Console(file=out, width=120, force_terminal=False), "eager")
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
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    problem = load_problem(Path(__file__).resolve().parents[1] / "fixtures" / "problem_relu.py")
    cfg = load_config(None, {"search": {"iterations": 10}})
    import tempfile

    with RunStore.open(Path(tempfile.mkdtemp()) / "r") as store:
        loop = SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), RecipesPolicy.from_config(cfg, on_gpu=False)))  # type: ignore[arg-type]
        assert loop.session.progress.iterations == 2  # singles, then their combination: not "1/10"


def test_on_a_pipe_a_long_stage_is_said_again_while_it_lasts_and_its_end_with_its_time() -> None:
    from stratagem.report.live import StageLines

    out = io.StringIO()
    entries = {"base": InFlight("reference baselines", "baseline", started=time.time() - 120)}
    lines = StageLines(Console(file=out, width=60, force_terminal=False), lambda: entries, heartbeat_s=0.05)
    lines.poll()
    lines.poll()  # nothing new, and not a heartbeat yet
    time.sleep(0.06)
    lines.poll()  # the heartbeat: the same stage, its time grown
    entries.clear()
    lines.poll()
    said = out.getvalue().splitlines()
    assert said[:2] == ["  reference baselines: baseline (120 s)"] * 2, said  # one line each, never folded
    assert len(said) == 3 and said[2] == "  reference baselines: done (120 s)", said


def test_a_workers_compiles_and_lock_waits_are_stages_said_once() -> None:
    from stratagem.evaluation.progress import stage_events

    heard: list[str] = []
    on_event = stage_events(heard.append)
    for ev in ({"event": "phase", "phase": "run"}, {"event": "start", "stage": "load"},
               {"event": "phase", "phase": "compile"}, {"event": "phase", "phase": "compile"},
               {"event": "phase", "phase": "run"}, {"event": "start", "stage": "baseline"},
               {"event": "phase", "phase": "wait", "holder": {"process": -1, "label": "x"}},
               {"event": "phase", "phase": "run"}, {"event": "done"}):
        on_event(ev)
    assert heard == ["load", "load: compiling", "load", "baseline",
                     "baseline: waiting for the timing lock, held by another process on this machine (pid -1, x)",
                     "baseline", "judge"]


def test_the_loops_baselines_and_confirmation_blocks_show_their_stages(tmp_path) -> None:
    from fakes import FakeEvaluator, ScriptedPolicy, src
    from test_loop import make_loop

    seen: list[tuple[str, str]] = []

    class Watching(FakeEvaluator):
        async def baseline(self, problem, *, refresh=False, on_stage=None, **kw):  # type: ignore[no-untyped-def]
            on_stage("baseline: compiling")
            seen.extend((k, f.stage) for k, f in loop.session.progress.inflight.items())
            return await super().baseline(problem, refresh=refresh, **kw)

        async def confirm_block(self, problem, designs, order, reference_ms=None, on_stage=None):  # type: ignore[no-untyped-def]
            out = await super().confirm_block(problem, designs, order, reference_ms, on_stage)
            seen.extend((k, f.stage) for k, f in loop.session.progress.inflight.items() if k == "confirm")
            return out

    loop, _store, _ = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5)]]), Watching(), iterations=1)
    asyncio.run(loop.run())
    assert ("baseline", "baseline: compiling") in seen
    assert any(k == "confirm" and s.startswith("block ") and s.endswith(": confirm") for k, s in seen), seen
