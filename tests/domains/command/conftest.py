"""Fixtures of the command-domain tests (their helpers: command_fixtures.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from command_fixtures import make_problem

from stratagem.config import EvaluationConfig, environment
from stratagem.core.design import Design
from stratagem.domains import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.results import Evaluation
from stratagem.evaluation.service import Evaluator


@pytest.fixture
def small_problem(tmp_path: Path) -> Path:
    return make_problem(tmp_path / "window_sums_small")


@pytest.fixture
def evaluate(cpu_config: EvaluationConfig) -> Callable[..., Evaluation]:
    """Evaluate a design (name -> text) against a problem directory in the sandbox, on the CPU."""
    def run(problem_dir: Path, files: Mapping[str, str]) -> Evaluation:
        problem = load_problem(problem_dir)
        ex = LocalExecutor.for_devices(["cpu"], cpu_config, environment())
        return asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(problem, Design(files=dict(files)),
                                                                    with_baseline=False))
    return run
