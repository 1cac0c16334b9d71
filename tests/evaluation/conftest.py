"""Helpers for the evaluation tests: candidates built from strings, real evaluations on the
CPU, and a scan of /proc for processes a candidate left behind.

Every worker spawn imports torch (a few seconds), so tests keep the number of runs small.
"""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from stratagem.config import EvaluationConfig, environment
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.results import Evaluation
from stratagem.evaluation.service import Evaluator

_TEMPLATE = '''\
import torch
import torch.nn as nn
{imports}

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
{forward}
        return torch.relu(self.lin(x)) * 2.0
'''


def make_candidate(imports: str = "", forward: str = "") -> str:
    """A correct candidate for problem_linear with extra module-level and forward code.

    `forward` runs at the start of every `forward` call (the first call is in the
    correctness stage); `imports` runs when the module is imported (the load stage).
    """
    body = textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8) if forward.strip() else ""
    return _TEMPLATE.format(imports=textwrap.dedent(imports).strip("\n"), forward=body)


def unique_sleep_arg() -> str:
    """A `sleep` argument no other process on the machine carries: 1000.<random digits>."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}1"


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def live_processes_with(token: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains `token`."""
    needle = token.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and _state(int(entry)) not in (None, "Z", "X"):
            found.append(int(entry))
    return found


def kill_leftovers(tokens: list[str]) -> list[int]:
    """Kill (by pid, after checking its command line) what a failed test left running."""
    killed = []
    for tok in tokens:
        for pid in live_processes_with(tok):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


@pytest.fixture
def linear_problem(fixtures: Path) -> Problem:
    return load_problem(fixtures / "problem_linear.py")


@pytest.fixture
def evaluate(
    cpu_config: EvaluationConfig, linear_problem: Problem, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Evaluation]:
    """Evaluate a candidate (source text or Design) end to end on a fresh CPU executor.

    The static checks are switched off here: these tests put deliberately hostile code
    (subprocesses, os._exit, sockets) in front of the sandbox itself, which the static checks
    would otherwise reject before any worker starts.
    """
    from stratagem.core.verdict import ValidatorResult
    from stratagem.domains.pytorch import domain

    monkeypatch.setattr(
        domain, "run_static_checks",
        lambda *a, **k: ValidatorResult("static_checks", "passed", details={"note": "disabled for sandbox tests"}),
    )

    def run(
        candidate: str | Design,
        *,
        cfg: EvaluationConfig | None = None,
        base_env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        problem: Problem | None = None,
    ) -> Evaluation:
        c = cfg or cpu_config
        design = candidate if isinstance(candidate, Design) else candidate_design(candidate)
        env = dict(environment() if base_env is None else base_env)
        executor = LocalExecutor.for_devices(["cpu"], c, env)
        evaluator = Evaluator(c, executor, "cpu")
        return asyncio.run(
            evaluator.evaluate(problem or linear_problem, design, with_baseline=False, timeout_s=timeout_s)
        )

    return run


def results_by_name(evaluation: Evaluation) -> dict[str, Any]:
    return {r.name: r for r in evaluation.verdict.results}


@pytest.fixture
def h() -> Any:
    """The helper functions above, for tests (conftest modules are not importable by name)."""
    import types

    return types.SimpleNamespace(
        make_candidate=make_candidate,
        unique_sleep_arg=unique_sleep_arg,
        live_processes_with=live_processes_with,
        kill_leftovers=kill_leftovers,
        results_by_name=results_by_name,
    )
