"""Where a command problem's design ran, as its evaluation records it: on a GPU the GPU the
slot pinned (a report that names the CPU for a GPU run misleads whoever compares results), the
CPU's model beside it; on the CPU the CPU."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from stratagem.domains.command.worker import describe
from stratagem.worker_api import stages


def fake_smi(tmp_path: Path, script: str) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


def test_a_gpu_run_names_the_gpu_the_slot_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, 'if [ "$4" = 3 ]; then echo "NVIDIA H200"; else echo "NVIDIA H100 80GB HBM3"; fi\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    env = describe("cuda")
    assert env["device_name"] == "NVIDIA H200" and env["cpu_name"] == stages.cpu_name()
    assert describe("cpu")["device_name"] == stages.cpu_name()


def test_without_nvidia_smi_the_cpu_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, "exit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert describe("cuda")["device_name"] == stages.cpu_name()
