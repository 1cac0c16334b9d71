"""Forgetting compiled code between the shapes stage and timing: only when something compiled."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from stratagem.domains.pytorch.worker import runtime


def test_reset_imports_nothing_when_nothing_was_compiled() -> None:
    """Importing dynamo only to reset it cost 5.3 s of every evaluation's shapes stage on an
    H200 (0.7 s on this CPU): an eager candidate must not pay it."""
    code = ("import sys, torch\nfrom stratagem.domains.pytorch.worker import runtime\n"
            "assert 'torch._dynamo' not in sys.modules, 'imported before the reset'\n"
            "runtime.reset_compiled()\nprint('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_reset_runs_once_dynamo_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    fake = types.SimpleNamespace(reset=lambda: calls.append(1))
    monkeypatch.setitem(sys.modules, "torch._dynamo", fake)
    runtime.reset_compiled()
    assert calls == [1]
