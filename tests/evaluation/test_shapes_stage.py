"""The shapes stage varies only what a candidate can follow.

A reference whose `forward` reads a module-level size constant is wired to it; varying that
constant changed the reference and not the candidate (its own module), so every honest
candidate that kept the reference's code failed as "hard-wired to the visible shapes" (the
`recipes` policy's copies of the reference among them).
"""

from __future__ import annotations

import asyncio

from stratagem.config import environment
from stratagem.domains.pytorch.domain import candidate_design
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
        problem, candidate_design(CANDIDATE), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    shapes = ev.verdict.result("shapes")
    assert shapes is not None
    # the aligned and the odd-size variant, each of batch_size alone (dim is the reference's own)
    assert [v["sizes"] for v in shapes.details["variants"]] == [{"batch_size": 48}, {"batch_size": 49}]


DERIVED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 64
num_classes = 32
input_shape = (num_classes,)


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
"""

HONEST_CE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)
"""


def test_a_constant_others_derive_from_varies_them_too(cpu_config):
    """KernelBench's 95_CrossEntropyLoss derives `input_shape = (num_classes,)` at import.
    Setting `num_classes` on the imported module left the predictions at the visible width
    while the targets reached the new one: every variant that grew it failed in the reference
    (on a GPU a device-side assert, after which the worker could run nothing, and the honest
    candidate was an error in timing). The variants import the reference again with the new
    values, so what derives from them follows, and every variant runs."""
    problem = parse_problem(DERIVED, name="derived")
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, environment())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(
        problem, candidate_design(HONEST_CE), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    variants = ev.verdict.result("shapes").details["variants"]
    grew = [v for v in variants if v["sizes"].get("num_classes", 0) > 32]
    assert grew and not [v for v in variants if "skipped" in v], variants
    assert {"batch_size", "num_classes"} <= {k for v in variants for k in v["sizes"]}
