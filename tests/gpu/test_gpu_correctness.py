"""Correctness that follows the numerics, on a GPU (pytest -m gpu on the GPU machine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratagem.config import environment, load_config
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent / "correctness"


def _evaluate(problem: str, candidate: str, mode: str):
    cfg = load_config(None, {"evaluation": {"device": "cuda", "baselines": ["eager"], "correctness_trials": 3,
                                            "correctness": {"mode": mode}}}).evaluation
    ex = LocalExecutor.for_devices(["cuda:0"], cfg, environment())
    design = candidate_design((HERE / candidate).read_text())
    return asyncio.run(Evaluator(cfg, ex, "cuda:0").evaluate(load_problem(HERE / problem), design,
                                                            with_baseline=False))


def test_compiled_conv_block_passes_in_the_calibrated_mode():
    ev = _evaluate("basic_block.py", "basic_block_compiled.py", "calibrated")
    c = ev.verdict.result("correctness")
    assert c is not None and c.details["mode"] == "calibrated", c.details.get("note")
    assert ev.verdict.status == "valid", ev.verdict.report()
    for t in c.details["trials"]:
        [a] = t["anchor"]
        assert a["reference"] > 0 and a["candidate"] <= a["limit"]
    print("calibrated errors:", [t["anchor"][0] for t in c.details["trials"]])


def test_bf16_autocast_of_a_long_matmul_is_judged_by_its_measured_error():
    ev = _evaluate("matmul_long_k.py", "matmul_bf16.py", "calibrated")
    c = ev.verdict.result("correctness")
    assert c is not None and c.details["mode"] == "calibrated"
    trials = c.details.get("trials") or []
    assert trials and all(t.get("anchor") for t in trials)
    within = all(a["candidate"] <= a["limit"] for t in trials for a in t["anchor"])
    assert (c.outcome == "passed") == within, (c.outcome, trials[-1]["anchor"])
    print("bf16 vs anchor:", trials[-1]["anchor"], "outcome", c.outcome)
