"""GPU verdicts through the real harness (run on the GPU machine: pytest -m gpu)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator, read_design

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures"
EXAMPLES = sorted((ROOT / "examples").glob("*/candidates/*.py"))


@pytest.fixture(scope="module")
def evaluator():
    cfg = load_config(None, {"evaluation": {"device": "cuda", "baselines": ["eager"], "timeout_s": 300}})
    return make_evaluator(cfg.evaluation)


def evaluate(evaluator, problem: Path, candidate: Path):
    return asyncio.run(evaluator.evaluate(p := load_problem(problem), read_design(candidate, p)))


@pytest.mark.parametrize("candidate", EXAMPLES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_example_candidates_are_valid_and_faster(evaluator, candidate):
    ev = evaluate(evaluator, candidate.parent.parent / "problem.py", candidate)
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.device.startswith("cuda")
    assert ev.environment["device_name"]
    assert ev.speedup is not None and ev.speedup > 1.0, f"speedup {ev.speedup}"


def test_cuda_candidate_valid(evaluator):
    ev = evaluate(evaluator, FIX / "problem_relu.py", FIX / "candidates/cuda_relu_ok.py")
    assert ev.verdict.status == "valid", ev.verdict.report()
    t = ev.timing
    assert t["method"] == "cuda_event/stream/paired"
    assert t["l2_flush_bytes"] >= 256 * 2**20
    assert len(t["device_sync_samples_ms"]) == len(t["samples_ms"]) == t["n"]
    assert t["device_sync_median_ms"] >= t["stream_median_ms"] == t["median_ms"]
    assert t["sync_overhead_ms"] > 0
    # An honest single-stream kernel leaves no work behind the timed stream.
    assert t["unsynced_work_ms"] < max(0.02, 0.1 * t["median_ms"]), t
    # The per-kernel profile the agents see names the candidate's own kernel, in microseconds.
    timing = next(r for r in ev.verdict.results if r.name == "timing").details
    prof = timing["profile"]
    assert prof["unit"] == "us" and prof["kernels"], prof
    assert any("relu" in name.lower() for name, _ in prof["kernels"]), prof["kernels"]
    assert all(us > 0 for _, us in prof["kernels"])


def test_wrong_cuda_candidate_invalid(evaluator):
    ev = evaluate(evaluator, FIX / "problem_relu.py", FIX / "candidates/cuda_relu_wrong.py")
    assert ev.verdict.status == "invalid"
    assert ev.verdict.failures[0].name == "correctness"
    assert ev.verdict.failures[0].kind == "wrong_output"


def test_illegal_address_is_a_verdict_not_a_dead_run(evaluator):
    ev = evaluate(evaluator, FIX / "problem_relu.py", FIX / "candidates/cuda_relu_illegal_address.py")
    assert ev.verdict.status == "invalid"
    f = ev.verdict.failures[0]
    assert f.name == "correctness"
    assert f.kind in ("cuda_error", "crash"), f
    # The harness still works afterwards (the poisoned worker was retired).
    ok = evaluate(evaluator, FIX / "problem_relu.py", FIX / "candidates/cuda_relu_ok.py")
    assert ok.verdict.status == "valid", ok.verdict.report()


@pytest.fixture(scope="module")
def strict_evaluator():
    cfg = load_config(None, {"evaluation": {"device": "cuda", "baselines": ["eager"], "timeout_s": 300,
                                            "integrity": "strict"}})
    return make_evaluator(cfg.evaluation)


@pytest.mark.parametrize("candidate", EXAMPLES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_strict_policy_on_examples(strict_evaluator, candidate):
    ev = evaluate(strict_evaluator, candidate.parent.parent / "problem.py", candidate)
    if candidate.stem == "torch_rewrite":  # a pass-through: torch ops only
        assert ev.verdict.status == "invalid", ev.verdict.report()
    else:
        assert ev.verdict.status == "valid", ev.verdict.report()
        prov = ev.verdict.result("provenance")
        assert prov.details["checked"] is True and prov.details["own_time_fraction"] >= 0.5
