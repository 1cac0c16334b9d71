"""The strict policy on the CPU: a C++ function the candidate compiles itself with load_inline,
looping over the data, is a kernel of its own; a C++ wrapper around torch calls is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.static.checks import checks_for_policy, run_static_checks

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def problem():
    return load_problem(FIX / "problem_linear.py")


def _rejections(problem, name: str, device: str) -> list[str]:
    src = (FIX / "cpu_ext" / name).read_text()
    r = run_static_checks(problem, src, checks=checks_for_policy("strict", device))
    return [x["check"] for x in r.details.get("rejections", [])]


def test_an_honest_cpp_loop_is_its_own_kernel_on_the_cpu(problem) -> None:
    assert _rejections(problem, "relu_loop.py", "cpu") == []
    # on a GPU a C++ host loop is not a kernel: there the work must run in __global__/Triton code
    assert _rejections(problem, "relu_loop.py", "cuda") == ["own_kernels"]


def test_a_cpp_wrapper_around_torch_is_not_a_kernel(problem) -> None:
    assert _rejections(problem, "torch_wrapper.py", "cpu") == ["own_kernels"]


def test_pure_torch_is_still_rejected_under_strict_on_the_cpu(problem) -> None:
    src = (FIX / "candidates" / "good_addmm.py").read_text()
    r = run_static_checks(problem, src, checks=checks_for_policy("strict", "cpu"))
    assert "own_kernels" in [x["check"] for x in r.details["rejections"]]


@pytest.mark.slow
def test_an_honest_cpu_extension_is_valid_under_strict_end_to_end(cpu_config) -> None:
    """Builds the extension (about a minute on 2 cores): `pytest -m slow`. The candidate does
    all the work in its own loop. (`relu_loop.py` is not the case here: strict's run-time
    check, the `provenance` stage, fails a design whose own code takes under half of the timed
    calls' time, and its loop beside torch's matmul took 19-36% in one measurement, more or
    less with the machine's load; tests/domains/test_strict_runtime.py.)"""
    import asyncio

    from stratagem.evaluation.executors import LocalExecutor
    from stratagem.evaluation.service import Evaluator

    cfg = cpu_config.model_copy(update={"integrity": "strict", "correctness_trials": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    design = candidate_design((FIX / "strict" / "inline_honest.py").read_text())
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / "problem_relu.py"), design,
                                                       with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
