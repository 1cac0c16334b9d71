"""The shapes stage varies only what a candidate can follow.

A reference whose `forward` reads a module-level size constant is wired to it; varying that
constant changed the reference and not the candidate (its own module), so every honest
candidate that kept the reference's code failed as "hard-wired to the visible shapes" (the
`recipes` policy's copies of the reference among them).
"""

from __future__ import annotations

import asyncio

from stratagem.config import environment
from stratagem.core.design import Design
from stratagem.domains.pytorch.problem import parse_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x.reshape(-1, dim)).sum(dim=1)


batch_size = 64
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
import torch.nn as nn

dim = 256


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x.reshape(-1, dim), 0).sum(dim=1)
"""


def test_a_candidate_keeping_the_references_own_constant_passes(cpu_config):
    problem = parse_problem(PROBLEM, name="reads_dim")
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, environment())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(
        problem, Design.from_source(CANDIDATE), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    shapes = ev.verdict.result("shapes")
    assert shapes is not None
    # the aligned and the odd-size variant, each of batch_size alone (dim is the reference's own)
    assert [v["sizes"] for v in shapes.details["variants"]] == [{"batch_size": 48}, {"batch_size": 49}]
