"""The rules the agents are told speak the run's device: a CPU run's name no GPU concept (side
streams, CUDA, cuBLAS, warps), a GPU run's no CPU-only one (at::parallel_for, OpenMP, oneDNN);
both say what the threads and state rules forbid in Python and in C++, and what they allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.config import EvaluationConfig
from stratagem.domains import load_problem
from stratagem.domains.pytorch.rules import agent_rules

PROBLEM = Path(__file__).resolve().parents[2] / "examples" / "01_elementwise" / "problem.py"
GPU_WORDS = ("side stream", "CUDA graph", "CUDA `", "cuBLAS", "cuDNN", "CUTLASS", "warp", "TF32", "__global__")
CPU_WORDS = ("at::parallel_for", "OpenMP", "oneDNN", "MKL")


@pytest.mark.parametrize("integrity", ["lenient", "strict"])
def test_each_device_is_told_its_own_words(integrity: str) -> None:
    problem = load_problem(PROBLEM)
    cpu = "\n".join(agent_rules(problem, EvaluationConfig(device="cpu", integrity=integrity)))  # type: ignore[call-arg]
    gpu = "\n".join(agent_rules(problem, EvaluationConfig(device="cuda", integrity=integrity)))  # type: ignore[call-arg]
    assert not [w for w in GPU_WORDS if w in cpu]
    assert not [w for w in CPU_WORDS if w in gpu]
    assert "`at::parallel_for`, OpenMP" in cpu and "atomics" in cpu  # what the threads rule allows
    assert "atomics" in gpu and "side streams" in gpu
    for text in (cpu, gpu):
        assert "in Python threading" in text and "std::thread" in text  # what it forbids, in each language
        assert "`x.data_ptr<float>()` to reach a tensor's memory is fine" in text


def test_a_run_on_auto_states_both_devices_rules() -> None:
    text = "\n".join(agent_rules(load_problem(PROBLEM), EvaluationConfig()))
    assert "side streams" in text and "oneDNN" in text
