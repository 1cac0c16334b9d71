"""A search run evaluating through the queue executor, as its own process, so a test can
SIGKILL it while its requests are being answered (no confirmation round: the resumed run asks
only for its baseline). Usage: python queue_run.py RUN_DIR QUEUE_DIR"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "search"))

from fakes import ScriptedPolicy  # noqa: E402

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402

ADV = HERE.parent / "adversarial"
PROBLEM = ADV / "problems/linear_relu.py"
HONEST = (ADV / "honest/addmm_fused.py").read_text()
DESIGNS = [HONEST + f"\nVARIANT = {v}\n" for v in (1, 2)]
FAST = {"device": "cpu", "baselines": ["eager"], "correctness_trials": 2,
        "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}


def make(run_dir: Path, queue: Path):
    cfg = load_config(None, {"evaluation": {**FAST, "executor": "queue", "queue_dir": str(queue), "queue_poll_s": 0.1,
                                            "queue_capacity": 4},
                             "search": {"iterations": 1, "patience": 5, "confirm_top": 0}})
    problem = load_problem(PROBLEM)
    store = RunStore.open(run_dir)
    store.add_problem(problem)
    if store.run() is None:
        store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
    ev = make_evaluator(cfg.evaluation)
    ev.executor.own(str(run_dir.resolve()))
    policy = ScriptedPolicy([DESIGNS] if not store.iterations() else [])
    return SearchLoop(RunSession(cfg, problem, store, ev, policy)), store  # type: ignore[arg-type]


if __name__ == "__main__":
    loop, _ = make(Path(sys.argv[1]), Path(sys.argv[2]))
    asyncio.run(loop.run())
