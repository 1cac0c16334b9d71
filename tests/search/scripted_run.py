"""A search run with the scripted policy and the fake evaluator, as its own process, so a
test can SIGKILL it mid-iteration. Usage: python scripted_run.py RUN_DIR DELAY_S"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from fakes import FakeEvaluator, ScriptedPolicy, src

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

PROBLEM = Path(__file__).resolve().parents[1] / "fixtures/problem_relu.py"
SCRIPT = [[src(f"{i}-{k}", 1.0 - i / 10 - k / 100) for k in range(2)] for i in range(3)]


def make(run_dir: Path, delay_s: float) -> tuple[SearchLoop, RunStore, FakeEvaluator]:
    cfg = load_config(None, {"search": {"iterations": 3, "patience": 5}})
    problem = load_problem(PROBLEM)
    store = RunStore.open(run_dir)
    store.add_problem(problem)
    store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
    ev = FakeEvaluator(delay_s=delay_s)
    n_done = len(store.iterations())
    policy = ScriptedPolicy(SCRIPT[n_done:])
    return SearchLoop(RunSession(cfg, problem, store, ev, policy)), store, ev  # type: ignore[arg-type]


if __name__ == "__main__":
    loop, _, _ = make(Path(sys.argv[1]), float(sys.argv[2]))
    asyncio.run(loop.run())
