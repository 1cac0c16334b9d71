"""What a worker measures of the reference alone (PyTorch: its FLOPs and bytes, the roofline's
input) is kept per problem, and later evaluations of the same problem are told not to measure
it again: on an H200 counting it cost every judge 4-5 s of imports, and every IPC record the
worker sent waited behind them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratagem.config import environment
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "paired"


def test_the_references_work_is_counted_once_per_problem(cpu_config, tmp_path) -> None:
    cfg = cpu_config.model_copy(update={"cache_dir": str(tmp_path / "cache")})
    ev = Evaluator(cfg, LocalExecutor.for_devices(["cpu"], cfg, environment()), "cpu")
    problem = load_problem(FIX / "problem.py")
    design = candidate_design((FIX / "same.py").read_text())

    first = asyncio.run(ev.evaluate(problem, design, with_baseline=False))
    assert first.verdict.status == "valid", first.verdict.report()
    counted = first.verdict.result("timing").details["work"]
    assert counted["flops"] >= 0 and counted["min_bytes"] > 0 and "counted" not in counted, counted

    second = asyncio.run(ev.evaluate(problem, design, with_baseline=False))
    assert second.verdict.status == "valid", second.verdict.report()
    work = second.verdict.result("timing").details["work"]
    assert work["counted"].startswith("by an earlier evaluation") and work["flops"] == counted["flops"], work
    assert work["min_bytes"] == counted["min_bytes"]

    # another problem is not told its work is known
    other = load_problem(Path(__file__).resolve().parents[1] / "fixtures" / "problem_relu.py")
    assert ev.facts.get(f"pytorch-{other.id}") is None
