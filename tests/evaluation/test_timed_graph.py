"""The timed program is in the state the baseline's is: compiled for the timed shapes only.

The shapes stage calls a fresh candidate at other sizes in the same worker. For a candidate
built on `torch.compile`, that made dynamo recompile with dynamic shapes ("automatic dynamic"),
and the timed calls then ran the shape-generic kernels, while the `compile` baseline (its own
worker) ran shape-specialized ones: on an H200 the same program timed 0.216 ms as a candidate
and 0.130 ms as the baseline (03_softmax). Compiled state is reset before timing.
"""

from __future__ import annotations

import asyncio

from stratagem.config import environment
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

# A custom dynamo backend that refuses to run, at the problem's own shapes, a graph compiled
# for symbolic shapes: only a timed call that went through such a graph fails.
CANDIDATE = """
import torch
import torch.nn as nn


def _symbolic(gm):
    for n in gm.graph.nodes:
        v = n.meta.get("example_value")
        if n.op == "placeholder" and (isinstance(v, torch.SymInt)
                                      or any(isinstance(d, torch.SymInt) for d in getattr(v, "shape", ()))):
            return True
    return False


def _backend(gm, example_inputs):
    symbolic = _symbolic(gm)

    def run(*args):
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        if symbolic and (256, 4096) in shapes:
            raise RuntimeError("the problem's own shapes ran through a shape-generic graph")
        return gm(*args)

    return run


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(self._relu, backend=_backend)

    def _relu(self, x):
        return torch.relu(x)

    def forward(self, x):
        return self.fn(x)
"""


def test_timing_does_not_inherit_the_shapes_stage_compilations(cpu_config, fixtures):
    problem = load_problem(fixtures / "problem_relu.py")
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, environment())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(
        problem, candidate_design(CANDIDATE), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    shapes = ev.verdict.result("shapes")
    assert shapes is not None and shapes.details["variants"], "the shapes stage must have run variants"
