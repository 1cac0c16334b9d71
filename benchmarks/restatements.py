"""Benchmark: what linking restatements saves (issue 15's measure).

Runs the `auto` policy on an example with a scripted model that repeats itself: each
Implementor answer is, in turn, a known candidate or a cosmetic restatement of one it gave
before (other comments, blank lines and local names). Before issue 15 the loop evaluated every
distinct source once (`distinct sources`, what it would have evaluated); now a design that only
restates an evaluated one is linked to its verdict without an evaluation (`evaluations`), and
the Implementor is told so. `designs/query` = distinct programs evaluated per LLM query.
Designs are judged by the instant stand-in evaluator of benchmarks/policies.py.

Usage: python benchmarks/restatements.py [--queries 40] [--only 06_fused_block] [--repeat-every 2]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from policies import VARIANT, ScriptedModel, StubEvaluator, known_candidates  # noqa: E402
from pydantic_ai import models  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from stratagem.agents.models import RoleModels  # noqa: E402
from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.policies.auto import AutoPolicy  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402


def cosmetic(source: str, n: int) -> str:
    """The same program with other comments, blank lines and the local name `x` renamed."""
    body = re.sub(r"\bx\b", f"inp{n}", source)
    return f"# restated, answer {n}\n\n" + body.replace("\n\n", "\n\n\n", 1)


class Repeating(ScriptedModel):
    """Every `repeat_every`-th code answer restates an earlier answer cosmetically."""

    def __init__(self, candidates: list[str], repeat_every: int) -> None:
        super().__init__(candidates)
        self.repeat_every = repeat_every
        self.given: list[str] = []
        self.sources: list[str] = []

    def _next(self) -> str:
        self.n += 1
        if self.given and self.repeat_every and self.n % self.repeat_every == 0:
            out = cosmetic(self.given[self.n % len(self.given)], self.n)
        else:  # the next known candidate in turn (each a distinct program)
            out = self.candidates[len(self.given) % len(self.candidates)] + f"{VARIANT}{self.n}\n"
            self.given.append(out)
        self.sources.append(out)
        return out


async def run(example: Path, queries: int, repeat_every: int) -> list[str]:
    problem = load_problem(example / "problem.py")
    cands, speed = known_candidates(example, problem)
    script = Repeating(cands, repeat_every)
    cfg = load_config(None, {"search": {"policy": "auto", "iterations": 1000, "patience": 1000,
                                        "max_queries": queries}, "agents": {"model": "test"}})
    evaluator = StubEvaluator(speed)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        pol = AutoPolicy(cfg, problem, run_dir / "work", RoleModels.of({"default": FunctionModel(script)}))
        with RunStore.open(run_dir) as store:
            store.add_problem(problem)
            store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
            t = time.perf_counter()
            out = await SearchLoop(RunSession(cfg, problem, store, evaluator, pol)).run()
            wall = time.perf_counter() - t
    answers = len(script.sources)
    before = len(set(script.sources))
    after = evaluator.calls
    q = out.spend.queries
    return [example.name, str(q), str(answers), str(before), str(after), str(before - after),
            f"{before / max(1, q):.2f}", f"{after / max(1, q):.2f}", f"{wall:.2f}"]


async def main_async(args: Any) -> None:
    models.ALLOW_MODEL_REQUESTS = False
    examples = sorted(p for p in (ROOT / "examples").iterdir() if (p / "problem.py").exists())
    if args.only:
        examples = [e for e in examples if e.name in args.only.split(",")]
    rows = [await run(e, args.queries, args.repeat_every) for e in examples]
    header = ["example", "queries", "answers", "distinct sources (evaluated before)", "evaluations now",
              "saved", "before: evaluations/query", "now: evaluations/query", "wall s"]
    print(f"\n{time.strftime('%Y-%m-%d')} · auto · {args.queries} queries · every {args.repeat_every}th "
          "code answer a cosmetic restatement")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat-every", type=int, default=2)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
