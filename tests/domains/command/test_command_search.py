"""A search on a command problem (issue 25, item 4): the loop turns what a policy (an agent)
writes as one text into the problem's editable files, the real sandboxed evaluator judges
them, and the run's views show each design as that same text. Before, the loop stored every
design as `candidate.py`, which the command domain rejects as a file it may not change."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from command_fixtures import example_design

from stratagem.config import environment, load_config
from stratagem.core.design import files_text, text_files
from stratagem.core.search import IterationResult, Plan, SearchState, Session
from stratagem.domains import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore


@dataclass
class WritesTexts:
    """A policy that writes the given texts in its first iteration, as an agent would."""

    texts: list[str]
    name: str = "scripted"
    seen: list[int] = field(default_factory=list)

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        self.seen.append(state.iteration)
        if len(self.seen) > 1:
            return IterationResult(plan=None, exhausted=True)
        ids = [(await session.evaluate(t, strategy="innovate", author="implementor-1")).design_id
               for t in self.texts]
        return IterationResult(plan=Plan("innovate", rationale="scripted"), design_ids=tuple(ids))

    async def review(self, design, state, session):
        return None


def test_one_text_per_design_round_trips_through_the_files() -> None:
    files = {"kernel.c": "int a;\n", "flags.txt": "-O3\n"}
    assert text_files(files_text(files), "kernel.c") == files
    assert text_files("int b;\n", "kernel.c") == {"kernel.c": "int b;\n"}
    assert files_text({"candidate.py": "x = 1\n"}) == "x = 1\n"  # one file: the text itself


def test_a_search_writes_and_judges_a_command_problems_files(small_problem: Path, cpu_config, tmp_path) -> None:
    cfg = load_config(None, {"search": {"iterations": 2, "patience": 5, "confirm_top": 0}})
    cfg = cfg.model_copy(update={"evaluation": cpu_config})
    problem = load_problem(small_problem)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
    fast = files_text({**example_design("fast"), "flags.txt": "-O3\n"})  # two files: one text
    wrong = files_text(example_design("wrong"))
    ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
    asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, WritesTexts([fast, wrong]))).run())

    designs = store.designs()
    assert sorted(sorted(d.files) for d in designs) == [["flags.txt", "kernel.c"], ["kernel.c"]]
    views = {v.source: v for v in st.stored_views(store)}
    assert set(views) == {fast, wrong}
    # correct and faster; on a loaded machine its timing may stay unstable (then it is not ranked)
    assert views[fast].status in ("valid", "unstable") and (views[fast].speedup or 0) > 1.0, views[fast]
    assert views[wrong].status == "invalid"
    # the agents are shown the build's seconds as the design's compile time (the domain's compile stage)
    # (its latest evaluation's: on a loaded machine an unstable timing is evaluated again)
    built = [v for v in store.evaluations() if v.design_id == views[fast].id][-1].validators
    build_s = next(v["duration_s"] for v in built if v["name"] == "build")
    assert views[fast].measures.compile_s == pytest.approx(build_s) and build_s > 0
