"""What counts as compiling, seen from outside: a compiler process in the worker's session."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from stratagem.evaluation.phases import compilers_in_session, is_compiler


@pytest.mark.parametrize("name", ["cc1plus", "g++", "gcc-13", "x86_64-linux-gnu-g++-13", "c++", "nvcc", "cicc",
                                  "ptxas", "ninja", "ld", "collect2", "as", "clang++", "cudafe++"])
def test_compilers_are_named_as_such(name: str) -> None:
    assert is_compiler(name)


@pytest.mark.parametrize("name", ["python3", "sleep", "bash", "pt_main_thread", "ccache-stats", "assistant"])
def test_other_processes_are_not(name: str) -> None:
    assert not is_compiler(name)


def test_a_compiler_in_the_session_is_seen_and_one_elsewhere_is_not(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    fake = tmp_path / "cc1plus"  # the process's name is its executable's
    shutil.copy(sleep, fake)
    leader = subprocess.Popen(["sh", "-c", f"{fake} 30 & {sleep} 30 & wait"], start_new_session=True)
    other = subprocess.Popen([str(fake), "30"], start_new_session=True)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            seen = compilers_in_session(leader.pid)
            time.sleep(0.05)
        assert seen == ["cc1plus"]  # its own, not `sleep`, not the other session's
        assert compilers_in_session(other.pid) == ["cc1plus"]
        assert compilers_in_session(2**22 + 12345) == []  # no such session
    finally:
        for p in (leader, other):
            subprocess.run(["pkill", "-s", str(p.pid)], check=False)
            p.kill()
            p.wait()
