"""Lets agent tests use the search tests' loop doubles without duplicating them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))

from fakes import ScriptedPolicy, src  # noqa: E402
from test_loop import make_loop  # noqa: E402

__all__ = ["ScriptedPolicy", "make_loop", "src"]
