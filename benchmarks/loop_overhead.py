"""Benchmark: the run loop's own overhead per iteration, excluding LLM and GPU time (issue 4).

A scripted policy proposes K designs per iteration and an evaluator answers instantly with a
stored-looking verdict, so what is timed is the loop itself: storing designs, evaluations,
agent calls and iterations in SQLite, rebuilding the search state, stop rules, the live-view
snapshot, plus the `auto` policy's own non-LLM work each iteration (context curation over
every design and rendering the Strategist's prompt). Reported per
iteration as the run database grows (target: under 1 s).

Usage: python benchmarks/loop_overhead.py [--iterations 200] [--designs-per-iteration 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import random  # noqa: E402

from stratagem.config import load_config  # noqa: E402
from stratagem.context import render  # noqa: E402
from stratagem.context.curate import curate  # noqa: E402
from stratagem.core.search import AgentCall, IterationResult, Plan  # noqa: E402
from stratagem.core.verdict import ValidatorResult, Verdict  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.results import Baseline, Evaluation  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402


def _stats(ms: float) -> dict[str, object]:
    return {"median_ms": ms, "q1_ms": ms, "q3_ms": ms, "samples_ms": [ms] * 50}


class InstantEvaluator:
    physical_device = "cpu"
    on_gpu = False

    async def evaluate(self, problem, design, **_):  # noqa: ANN001, ANN003
        ms = 0.5 + (hash(design.id) % 1000) / 1e4
        results = (ValidatorResult("static_checks", "passed", duration_s=0.0),
                   ValidatorResult("correctness", "passed", duration_s=0.0),
                   ValidatorResult("timing", "passed", details={"runtime": _stats(ms)}, duration_s=0.0))
        base = Baseline(problem.id, {"eager": _stats(1.0)}, {}, True, Verdict(()), "eager")
        return Evaluation(problem=problem, design=design, verdict=Verdict(results), device="cpu",
                          environment={}, seeds=(1,), baseline=base)


class Scripted:
    name = "scripted"

    def __init__(self, k: int, source_kb: int, timings: list[float], cfg) -> None:  # noqa: ANN001
        self.k, self.pad, self.timings, self.cfg = k, "#" * (source_kb * 1024), timings, cfg
        self.curation_s: list[float] = []

    async def iterate(self, state, session):  # noqa: ANN001
        t0 = time.perf_counter()
        curated = curate(state, self.cfg.context, random.Random(state.iteration))
        brief = render.ProblemBrief.from_state(state)
        prompts = [render.render_strategist(brief, curated, iteration=state.iteration)]
        assert prompts[0]
        self.curation_s.append(time.perf_counter() - t0)
        session.record_call(AgentCall(role="strategist", model="m", prompt_hash="h", input_tokens=5000,
                                      output_tokens=500, requests=1, cost_usd=0.01, messages_json="[]" * 2000))
        ids = []
        for j in range(self.k):
            fb = await session.evaluate(f"# {state.iteration}-{j}\n{self.pad}\nclass ModelNew: pass\n",
                                        strategy="innovate", author=f"implementor-{j}")
            ids.append(fb.design_id)
        self.timings.append(time.perf_counter() - t0)
        return IterationResult(plan=Plan("innovate"), design_ids=tuple(ids))

    async def review(self, design, state, session):  # noqa: ANN001
        return None


async def run(args: argparse.Namespace) -> list[float]:
    cfg = load_config(None, {"search": {"iterations": args.iterations, "patience": args.iterations}})
    problem = load_problem(ROOT / "examples/01_elementwise/problem.py")
    per_iter: list[float] = []
    with tempfile.TemporaryDirectory() as d, RunStore.open(Path(d)) as store:
        store.add_problem(problem)
        store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        policy = Scripted(args.designs_per_iteration, args.source_kb, [], cfg)
        loop = SearchLoop(RunSession(cfg, problem, store, InstantEvaluator(), policy))  # type: ignore[arg-type]
        t = time.perf_counter()
        marks: list[float] = []
        orig = loop._iterate

        async def timed(n: int) -> bool:
            s = time.perf_counter()
            r = await orig(n)
            marks.append(time.perf_counter() - s)
            return r

        loop._iterate = timed  # type: ignore[method-assign]
        await loop.run()
        per_iter = marks
        print(f"total {time.perf_counter() - t:.2f} s for {len(marks)} iterations; curation + "
              f"prompt median {statistics.median(policy.curation_s) * 1e3:.1f} ms")
    return per_iter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--designs-per-iteration", type=int, default=4)
    ap.add_argument("--source-kb", type=int, default=8, help="size of each design's source")
    args = ap.parse_args()
    per = asyncio.run(run(args))
    print(f"\n{time.strftime('%Y-%m-%d')} · {args.designs_per_iteration} designs/iteration · "
          f"{args.source_kb} KiB sources · loop overhead per iteration (s)\n")
    print("| iterations | designs in store | median s | max s |")
    print("|---|---|---|---|")
    step = max(1, len(per) // 5)
    for lo in range(0, len(per), step):
        chunk = per[lo:lo + step]
        print(f"| {lo + 1}-{lo + len(chunk)} | {(lo + len(chunk)) * args.designs_per_iteration} | "
              f"{statistics.median(chunk):.4f} | {max(chunk):.4f} |")


if __name__ == "__main__":
    main()
