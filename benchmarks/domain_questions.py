"""How many questions the evaluator asks a problem's domain (and the Task it opens on the
problem) per evaluation: the review of issue 45 counted 19 warm and 30 cold. Counts every call
and attribute read from outside the domain's own code, for one evaluation with a cold cache (the
reference baselines measured) and one warm, on the CPU. Prints one table.

    python benchmarks/domain_questions.py [PROBLEM.py CANDIDATE.py]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from stratagem import domains  # noqa: E402
from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
from stratagem.evaluation import baselines, results, service  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402

ASKED: Counter[str] = Counter()


class _Counting:
    """The object, every attribute read from outside counted (methods and members alike)."""

    def __init__(self, inner: Any, prefix: str) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name not in ("problem", "cfg"):  # a task's own inputs, handed back: not a question
            ASKED[f"{self._prefix}.{name}"] += 1
        value = getattr(self._inner, name)
        if name == "open":
            return lambda *a, **k: _Counting(value(*a, **k), "task")
        return value


def main() -> None:
    problem_path = Path(sys.argv[1]) if len(sys.argv) > 2 else ROOT / "tests/adversarial/problems/linear_relu.py"
    candidate = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    real = domains.get_domain
    for module in (service, baselines, results):  # every evaluation-layer module that asks the registry
        module.get_domain = lambda name: _Counting(real(name), "domain")  # type: ignore[assignment]
    problem = domains.load_problem(problem_path)
    source = (candidate or ROOT / "tests/adversarial/honest/functional_linear.py").read_text()
    with tempfile.TemporaryDirectory() as cache:
        cfg = load_config(None, {"evaluation": {"device": "cpu", "cache_dir": cache,
                                                "timing": {"warmup_ms": 5, "budget_ms": 50}}}).evaluation
        rows = []
        for label in ("cold", "warm"):
            ASKED.clear()
            evaluator = make_evaluator(cfg)
            ev = asyncio.run(evaluator.evaluate(problem, candidate_design(source)))
            asyncio.run(evaluator.executor.aclose())
            rows.append((label, ev.verdict.status, sum(ASKED.values()), dict(sorted(ASKED.items()))))
    print(f"{'evaluation':<11}{'status':<9}{'questions':>9}  by member")
    for label, status, n, by in rows:
        print(f"{label:<11}{status:<9}{n:>9}  " + ", ".join(f"{k} {v}" for k, v in by.items()))


if __name__ == "__main__":
    main()
