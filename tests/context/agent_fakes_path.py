"""Runs one `auto` iteration through the loop on the fake evaluator and returns the first
Strategist prompt (for the context tests)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "search"))
sys.path.insert(0, str(HERE / "agents"))

from agent_fakes import output, user_prompts  # noqa: E402
from fakes import FakeEvaluator, src  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.policies.auto import AutoPolicy  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402

PROBLEM = HERE / "fixtures/problem_relu.py"


def first_prompt_of_a_run(tmp: Path) -> str:
    seen: list[str] = []

    def strategist(messages, info):
        seen.extend(user_prompts(messages))
        return output(info, {"strategy": "innovate", "evidence": [], "rationale": "r", "instructions": "x"})

    def implementor(messages, info):
        return output(info, {"source": src("a", 0.5), "notes": "n"})

    cfg = load_config(None, {"search": {"iterations": 1}, "agents": {"model": "test", "analyst": False}})
    problem = load_problem(PROBLEM)
    pol = AutoPolicy.from_config(cfg, problem, tmp / "work", models={
        "strategist": FunctionModel(strategist), "implementor": FunctionModel(implementor)})
    with RunStore.open(tmp / "run") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), pol)).run())  # type: ignore[arg-type]
    return seen[0]
