"""Benchmark: the search policies at an equal query budget, and the loop's own overhead per query
(issue 14).

Runs `recipes`, `auto`, `pike-b` and `pike-o` on each example with a scripted model (a
pydantic-ai FunctionModel) that answers every code query with one of the example's known
candidates (`examples/*/candidates/*.py`, and the reference renamed `ModelNew`), in turn; the
Strategist gets a fixed plan, the brainstorm a bullet list. Each policy spends the same
`--queries` (recipes asks none: it runs until it has nothing more to try).

By default the designs are judged by a stand-in evaluator that answers at once (every known
candidate valid at a fixed paired speedup, 1.0x for the reference echo), so what is left of the
wall time is the loop's own work: the policy, the Session, the store, the context and prompt
rendering, pydantic-ai. `overhead ms/query` = (wall - model time - evaluation time) / queries
(per design for recipes). `--harness real` judges with the real harness instead (slow: tens of
seconds per distinct design on a CPU).

Usage: python benchmarks/policies.py [--queries 40] [--only 01_elementwise,...] [--harness stub|real]
       [--device cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pydantic_ai import models  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from stratagem.agents.models import RoleModels  # noqa: E402
from stratagem.agents.offline import echo_candidate  # noqa: E402
from stratagem.config import load_config  # noqa: E402
from stratagem.core.design import Design  # noqa: E402
from stratagem.core.problem import Problem  # noqa: E402
from stratagem.core.verdict import ValidatorResult, Verdict  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.results import Baseline, Evaluation  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.policies.registry import build_policy, policy_settings, resolved_config  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402

POLICIES = ("recipes", "auto", "pike-b", "pike-o")


@dataclass
class ScriptedModel:
    """Known candidates in turn; the time spent answering is counted."""

    candidates: list[str]
    seconds: float = 0.0
    requests: int = 0
    n: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        t = time.perf_counter()
        self.requests += 1
        try:
            return self._answer(messages, info)
        finally:
            self.seconds += time.perf_counter() - t

    def _next(self) -> str:
        """The next known candidate, marked with the answer's number: every answer is a new
        design (as real answers are), judged as the candidate it is."""
        self.n += 1
        return self.candidates[self.n % len(self.candidates)] + f"{VARIANT}{self.n}\n"

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = " ".join(str(getattr(p, "content", "")) for m in messages for p in getattr(m, "parts", ()))
        if info.output_tools:
            tool = info.output_tools[0]
            props = (tool.parameters_json_schema or {}).get("properties", {})
            if "strategy" in props:
                args: dict[str, Any] = {"strategy": "innovate", "evidence": [], "rationale": "benchmark",
                                        "instructions": "rewrite the reference as a faster ModelNew"}
            elif "cheating" in props:
                args = {"cheating": False, "reason": "benchmark"}
            else:
                args = {"source": self._next(), "notes": "benchmark"}
            return ModelResponse(parts=[ToolCallPart(tool.name, args)])
        if "brainstorming agent" in prompt:
            return ModelResponse(parts=[TextPart("\n".join(f"- idea {i}" for i in range(10)))])
        return ModelResponse(parts=[TextPart(f"```python\n{self._next()}```\n")])


EAGER_MS = 1.0
VARIANT = "\n# answer "


def _stats(ms: float) -> dict[str, Any]:
    return {"median_ms": ms, "q1_ms": ms, "q3_ms": ms, "samples_ms": [ms] * 3}


@dataclass
class StubEvaluator:
    """Answers at once: a known candidate is valid at its fixed speedup, anything else valid
    at eager's speed (a deterministic +-5%)."""

    speedups: dict[str, float]
    physical_device: str = "cpu"
    on_gpu: bool = False
    seconds: float = 0.0
    calls: int = 0
    executor: Any = field(default=None)

    async def baseline(self, problem: Problem, **_: Any) -> Baseline:
        r = 1.25
        return Baseline(problem.id, {"eager": _stats(EAGER_MS), "compile": {
            **_stats(EAGER_MS / r), "vs_eager": {"ratio": r, "low": r, "high": r}, "correctness": {"ok": True},
            "stability": {"verdict": "stable", "reasons": [], "notes": []}}}, {}, False, Verdict(()), "eager")

    async def evaluate(self, problem: Problem, design: Design, *, baseline: Baseline | None = None,
                       **_: Any) -> Evaluation:
        t = time.perf_counter()
        self.calls += 1
        base = design.files["candidate.py"].split(VARIANT)[0]
        h = hashlib.sha256(base.encode()).hexdigest()
        ratio = self.speedups.get(h, 0.95 + 0.1 * (int(h[:4], 16) / 0xFFFF))
        ms = EAGER_MS / ratio
        timing = {"runtime": _stats(ms), "reference": _stats(EAGER_MS),
                  "speedup": {"ratio": ratio, "low": ratio * 0.99, "high": ratio * 1.01, "pairs": 12},
                  "stability": {"verdict": "stable", "reasons": [], "notes": []}}
        results = (ValidatorResult("static_checks", "passed", duration_s=0.0),
                   ValidatorResult("correctness", "passed", duration_s=0.0),
                   ValidatorResult("timing", "passed", details=timing, duration_s=0.0))
        ev = Evaluation(problem=problem, design=design, verdict=Verdict(results), device="cpu", environment={},
                        seeds=(1,), baseline=baseline or await self.baseline(problem))
        self.seconds += time.perf_counter() - t
        return ev


def known_candidates(example: Path, problem: Problem) -> tuple[list[str], dict[str, float]]:
    cands = [echo_candidate(problem.source)]
    cands += [p.read_text(encoding="utf-8") for p in sorted((example / "candidates").glob("*.py"))]
    speed = {hashlib.sha256(c.encode()).hexdigest(): (1.0 if i == 0 else 1.0 + 0.5 * i) for i, c in enumerate(cands)}
    return cands, speed


async def run_one(example: Path, policy: str, queries: int, harness: str, device: str) -> list[str]:
    problem = load_problem(example / "problem.py")
    cands, speed = known_candidates(example, problem)
    script = ScriptedModel(cands)
    search: dict[str, Any] = {"policy": policy, "iterations": 1000, "patience": 1000 if policy != "recipes" else 3}
    if policy != "recipes":
        search["max_queries"] = queries
    over: dict[str, Any] = {"search": search, "agents": {"model": "test"} if policy != "recipes" else {},
                            "evaluation": {"device": device}}
    cfg = resolved_config(load_config(None, {k: v for k, v in over.items() if v}))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        if harness == "real":
            from stratagem.evaluation.api import make_evaluator

            evaluator: Any = make_evaluator(cfg.evaluation)
        else:
            evaluator = StubEvaluator(speed)
        fm = RoleModels.of({"default": FunctionModel(script)})
        if policy == "auto":
            from stratagem.search.policies.auto import AutoPolicy

            pol: Any = AutoPolicy(cfg, problem, run_dir / "work", fm)
        elif policy in ("pike-b", "pike-o"):
            from stratagem.search.policies.pike_b import PikeBPolicy
            from stratagem.search.policies.pike_o import PikeOPolicy

            cls = PikeBPolicy if policy == "pike-b" else PikeOPolicy
            pol = cls(cfg, problem, run_dir / "work", fm, policy_settings(cfg))  # type: ignore[arg-type]
        else:
            pol = build_policy(cfg, problem, False, run_dir / "work")
        with RunStore.open(run_dir) as store:
            store.add_problem(problem)
            store.start_run(problem.id, policy, cfg.model_dump(mode="json"))
            t = time.perf_counter()
            out = await SearchLoop(RunSession(cfg, problem, store, evaluator, pol)).run()
            wall = time.perf_counter() - t
            n_designs = len(store.designs())
        if harness == "real":
            await evaluator.executor.aclose()
    # the real harness: its workers' seconds (evaluations may overlap, so this is an estimate)
    eval_s = evaluator.seconds if harness != "real" else out.spend.gpu_seconds
    per = out.spend.queries or n_designs
    overhead_ms = 1000 * (wall - script.seconds - eval_s) / max(1, per)
    best = out.top.speedup_text() if out.top is not None else "-"
    return [example.name, policy, str(out.spend.queries), str(n_designs), str(out.spend.evaluations),
            f"{wall:.2f}", f"{script.seconds:.3f}", f"{eval_s:.3f}",
            f"{overhead_ms:.1f}" + ("" if out.spend.queries else " /design"), best, out.stop_reason[:40]]


async def main_async(args: argparse.Namespace) -> None:
    models.ALLOW_MODEL_REQUESTS = False
    examples = sorted(p for p in (ROOT / "examples").iterdir() if (p / "problem.py").exists())
    if args.only:
        examples = [e for e in examples if e.name in args.only.split(",")]
    rows = []
    for ex in examples:
        for pol in (args.policies.split(",") if args.policies else POLICIES):
            rows.append(await run_one(ex, pol, args.queries, args.harness, args.device))
            print(rows[-1], flush=True)
    header = ["example", "policy", "queries", "designs", "evaluations", "wall s", "model s", "eval s",
              "overhead ms/query", "best", "stop"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{time.strftime('%Y-%m-%d')} · harness {args.harness} · device {args.device} · "
          f"{args.queries} queries per LLM policy")
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--only", default="")
    ap.add_argument("--policies", default="", help="a comma list (default: all four)")
    ap.add_argument("--harness", choices=("stub", "real"), default="stub")
    ap.add_argument("--device", default="cpu")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
