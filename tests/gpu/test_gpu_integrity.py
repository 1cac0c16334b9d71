"""GPU-only cheats the runtime checks must catch even when the static checks are bypassed
(run on the GPU machine: pytest -m gpu). Run on an H200 on 2026-11-30 (both pass)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator, read_design

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
PROBLEM = HERE.parents[0] / "fixtures/problem_relu.py"


@pytest.fixture
def evaluate(monkeypatch):
    # The static `streams` / `mutable_state` checks reject these first; bypass them to test the
    # runtime layer on its own.
    monkeypatch.setattr(domain, "run_static_checks",
                        lambda *a, **k: ValidatorResult("static_checks", "passed", details={}))
    cfg = load_config(None, {"evaluation": {"device": "cuda", "baselines": ["eager"], "timeout_s": 300}})
    ev = make_evaluator(cfg.evaluation)

    def run(name: str):
        return asyncio.run(ev.evaluate(p := load_problem(PROBLEM), read_design(HERE / "cheats" / name, p)))

    return run


def test_side_stream_work_is_rejected_by_timing(evaluate):
    ev = evaluate("side_stream_relu.py")
    assert ev.verdict.status == "invalid", ev.verdict.report()
    f = ev.verdict.failures[0]
    assert f.name == "timing" and f.reason.startswith("side_stream:"), ev.verdict.report()


def test_half_written_output_is_caught(evaluate):
    ev = evaluate("half_written_relu.py")
    assert ev.verdict.status == "invalid", ev.verdict.report()
    f = ev.verdict.failures[0]
    assert f.name in ("correctness", "integrity"), ev.verdict.report()
