"""Compiling and running have their own limits, told apart by what the worker does: time while
torch.compile compiles (or a compiler process runs) is charged to the compile limit; imports,
`__init__` and every call, the first included, run, and a hang there is cut at the run limit
(issue 23: a first call that slept forever was charged to the 300 s compile limit)."""

from __future__ import annotations

import asyncio
import time

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

MODULE = """
import time
import torch
import torch.nn as nn
{top}

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.calls = 0
        {init}

    def forward(self, x):
        self.calls += 1
        {call}
        return torch.relu(self.lin(x)) * 2.0
"""

SLOW_BACKEND = """
LOADED = time.time()


def slow_backend(gm, example_inputs):
    if time.time() - LOADED < 30:  # the first compile takes this long (recompiles, later, do not)
        time.sleep({seconds})
    return gm.forward
"""


def _source(top: str = "", init: str = "pass", call: str = "pass") -> str:
    return MODULE.format(top=top, init=init, call=call)


def _evaluate(cfg, fixtures, source: str):
    from stratagem.config import environment

    problem = load_problem(fixtures / "problem_linear.py")
    ex = LocalExecutor.for_devices(["cpu"], cfg, environment())
    t0 = time.monotonic()
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(problem, candidate_design(source), with_baseline=False))
    return ev, time.monotonic() - t0


HANGS = {
    "at import": _source(top="time.sleep(3600)"),
    "in __init__": _source(init="time.sleep(3600)"),
    "in the first call": _source(call="time.sleep(3600)"),
    "spinning in the first call": _source(call="while True:\n            pass"),
    "in a later call": _source(call="if self.calls > 3:\n            time.sleep(3600)"),
}


@pytest.mark.parametrize("where", list(HANGS))
def test_a_hang_is_running_not_compiling(where, cpu_config, fixtures):
    """Two limits (the defaults' shape: a short run limit, a long compile limit): a hang
    anywhere in the candidate's own code is cut at the run limit, however early it comes."""
    cfg = cpu_config.model_copy(update={"timeout_s": 8.0, "compile_timeout_s": 300.0, "correctness_trials": 2})
    ev, wall = _evaluate(cfg, fixtures, HANGS[where])
    assert ev.verdict.status == "invalid"
    f = ev.verdict.failures[0]
    assert f.kind == "timeout" and "8 s run limit" in (f.reason or ""), f.reason
    assert "it ran " in (f.reason or "")  # where the time went is said
    assert wall < 60, wall  # the run limit, the process start and the group's kill; never 300 s


def test_a_slow_compile_within_its_own_limit_is_not_a_timeout(cpu_config, fixtures):
    """torch.compile compiling (dynamo's callbacks) for longer than the whole run limit, under
    a compile limit that holds it: valid, and the time was charged to compiling."""
    cfg = cpu_config.model_copy(update={"timeout_s": 30.0, "compile_timeout_s": 120.0, "correctness_trials": 2})
    source = _source(top=SLOW_BACKEND.format(seconds=35),
                     init="self.fn = torch.compile(lambda t: t * 1.0, backend=slow_backend)",
                     call="x = self.fn(x)")
    ev, wall = _evaluate(cfg, fixtures, source)
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert wall > 35


def test_a_compile_that_hangs_is_cut_at_the_compile_limit(cpu_config, fixtures):
    cfg = cpu_config.model_copy(update={"timeout_s": 120.0, "compile_timeout_s": 10.0, "correctness_trials": 2})
    source = _source(top=SLOW_BACKEND.format(seconds=3600),
                     init="self.fn = torch.compile(lambda t: t * 1.0, backend=slow_backend)",
                     call="x = self.fn(x)")
    ev, wall = _evaluate(cfg, fixtures, source)
    assert ev.verdict.status == "invalid"
    f = ev.verdict.failures[0]
    assert f.kind == "timeout" and "10 s compile limit" in (f.reason or ""), f.reason
    assert wall < 60, wall
