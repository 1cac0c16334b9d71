"""The strict policy's runtime provenance on the GPU (issue 23): torch.profiler attributes each
measured call's kernels to the candidate's own CUDA kernels by name. The three fixtures in
`strict/` share one `load_inline` source and name, so one nvcc build serves them all.
Run on the GPU machine: pytest -m gpu tests/gpu/test_gpu_strict.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator, read_design

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
PROBLEM = HERE.parents[0] / "fixtures/problem_relu.py"


@pytest.fixture(scope="module")
def evaluate():
    def config(policy: str):  # the policy in its own section ([pytorch], issue 25)
        return load_config(None, {"evaluation": {"device": "cuda", "baselines": ["eager"], "timeout_s": 300},
                                  "pytorch": {"integrity": policy}}).evaluation

    ev = make_evaluator(config("strict"))

    def run(name: str, policy: str = "strict"):
        e = ev if policy == "strict" else make_evaluator(config(policy))
        return asyncio.run(e.evaluate(p := load_problem(PROBLEM), read_design(HERE / "strict" / f"cuda_{name}.py", p)))

    return run


def _failed_provenance(ev):
    assert ev.verdict.status == "invalid", ev.verdict.report()
    prov = ev.verdict.result("provenance")
    assert prov is not None and prov.outcome == "failed", ev.verdict.report()
    assert ev.verdict.result("timing").outcome == "passed"
    return prov


def test_an_honest_cuda_kernel_is_valid_under_strict(evaluate) -> None:
    ev = evaluate("honest")
    assert ev.verdict.status == "valid", ev.verdict.report()
    d = ev.verdict.result("provenance").details
    assert d["calls_running_own_code"] == d["calls_measured"] == 3, d
    assert d["own_time_fraction"] > 0.8 and any("strict_relu_kernel" in k for k in d["own_kernels"]), d


def test_a_cuda_kernel_in_a_dead_branch_fails_strict_as_never_ran(evaluate) -> None:
    prov = _failed_provenance(evaluate("dead_branch"))
    assert prov.details["case"] == "never_ran", prov.reason
    assert evaluate("dead_branch", "lenient").verdict.status == "valid"


def test_a_cuda_kernel_run_only_before_timing_fails_strict(evaluate) -> None:
    prov = _failed_provenance(evaluate("warmup_only"))
    assert prov.details["case"] in ("ran_only_outside", "never_ran"), prov.reason
