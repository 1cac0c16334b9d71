"""The load stage (compiles) has its own limit; the run limit starts once it has ended."""

from __future__ import annotations

import asyncio

from stratagem.core.design import Design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

SLOW_IMPORT = """
import time
import torch
import torch.nn as nn
time.sleep({seconds})


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0
"""


def _evaluate(cfg, fixtures, seconds: float):
    from stratagem.config import environment

    problem = load_problem(fixtures / "problem_linear.py")
    ex = LocalExecutor.for_devices(["cpu"], cfg, environment())
    design = Design.from_source(SLOW_IMPORT.format(seconds=seconds))
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(problem, design, with_baseline=False))


def test_slow_compile_within_its_own_limit_is_not_a_timeout(cpu_config, fixtures):
    cfg = cpu_config.model_copy(update={"timeout_s": 4.0, "compile_timeout_s": 40.0})
    ev = _evaluate(cfg, fixtures, seconds=6)
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.sandbox["duration_s"] > 6


def test_hang_at_import_is_cut_at_the_compile_limit(cpu_config, fixtures):
    cfg = cpu_config.model_copy(update={"timeout_s": 60.0, "compile_timeout_s": 6.0})
    ev = _evaluate(cfg, fixtures, seconds=1000)
    assert ev.verdict.status == "invalid"
    f = ev.verdict.failures[0]
    assert (f.name, f.kind) == ("load", "timeout")
    assert "6 s compile limit" in f.reason
    assert ev.sandbox["duration_s"] < 20
