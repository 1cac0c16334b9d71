"""A confirmation block's warm loop calls one input set again and again: a design that keeps its
output on the harness's input tensors would be served from them there. The sets are sealed
around each design's timings (`guard.Inputs`): that design's entry is a `harness_tampering`
error, and the honest design beside it is confirmed as usual."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratagem.config import EvaluationConfig, environment
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

ADV = Path(__file__).resolve().parents[1] / "adversarial"


def test_a_design_storing_its_output_on_the_input_sets_is_rejected_in_the_confirmation(
        cpu_config: EvaluationConfig) -> None:
    problem = load_problem(ADV / "problems" / "linear_relu.py")
    designs = {"honest": (ADV / "honest" / "addmm_fused.py").read_text(),
               "cheat": (ADV / "candidates" / "tamper_input_attribute.py").read_text()}

    async def block() -> dict:
        ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
        try:
            return await ev.confirm_block(problem, designs, ["cheat", "honest"])
        finally:
            await ev.executor.aclose()

    programs = asyncio.run(block())["programs"]
    assert programs["cheat"]["error"].startswith("harness_tampering: the candidate stored attribute(s) _stash"), \
        programs["cheat"]
    assert "fresh" in programs["honest"] and "error" not in programs["honest"], programs["honest"]
