"""`stratagem audit`: null models that pass a problem's correctness check are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stratagem.cli import main

FIX = Path(__file__).parent / "fixtures"


def audit(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict]:
    code = main(["audit", str(path), "--device", "cpu", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_identity_passes_relu_on_nonnegative_inputs(capsys):
    code, out = audit(capsys, FIX / "audit/relu_rand.py")
    assert code == 0 and out["status"] == "valid"
    assert out["cheatable"] is True
    assert out["passing_nulls"] == ["input_0_copy"]
    assert out["seed_dependent"] is True


def test_zeros_pass_wide_softmax_and_output_ignores_seed(capsys):
    code, out = audit(capsys, FIX / "audit/softmax_wide.py")
    assert code == 0
    assert "zeros" in out["passing_nulls"] and "constant" in out["passing_nulls"]
    assert out["seed_dependent"] is False


def test_constant_function_is_flagged(capsys):
    _, out = audit(capsys, FIX / "audit/constant_output.py")
    assert "constant" in out["passing_nulls"] and out["seed_dependent"] is False


def test_sound_problem_has_no_passing_null(capsys):
    code, out = audit(capsys, FIX / "problem_linear.py")
    assert code == 0 and out["cheatable"] is False and out["passing_nulls"] == []
    # every null model was actually tried, on two seeds
    assert {"zeros", "constant", "subsample", "half_precision"} <= set(out["nulls"])
    assert all(len(rows) == 2 for rows in out["nulls"].values())


def test_broken_problem_is_an_error(capsys, tmp_path):
    p = tmp_path / "broken.py"
    p.write_text(
        "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        raise RuntimeError('nope')\n"
        "def get_inputs():\n    return [torch.randn(3)]\ndef get_init_inputs():\n    return []\n"
    )
    code, out = audit(capsys, p)
    assert code == 1 and out["status"] == "error"
    assert out["failures"][0]["kind"] == "problem_error"
