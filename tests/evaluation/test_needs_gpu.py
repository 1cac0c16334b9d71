"""GPU-only candidates evaluated on the CPU: `needs_gpu`, not `invalid` (they are not wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from stratagem.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only machine")
@pytest.mark.parametrize("name, stage", [("triton_kernel.py", "load"), ("calls_cuda.py", "correctness")])
def test_gpu_only_code_on_the_cpu_needs_a_gpu(name: str, stage: str, capsys) -> None:
    try:
        import triton  # noqa: F401

        if name == "triton_kernel.py":
            pytest.skip("triton is installed here")
    except ImportError:
        pass
    code = main(["eval", str(FIX / "problem_linear.py"), str(FIX / "needs_gpu" / name), "--device", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0  # a verdict was reached
    assert out["status"] == "needs_gpu", out["failures"]
    first = out["failures"][0]
    assert first["validator"] == stage and first["kind"] == "needs_gpu"
    assert "needs a GPU" in first["reason"] and "--device cuda" in first["reason"]


def test_a_wrong_cpu_candidate_is_still_invalid(capsys) -> None:
    code = main(["eval", str(FIX / "problem_linear.py"), str(FIX / "candidates" / "wrong_scale.py"), "--device", "cpu",
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "invalid"
