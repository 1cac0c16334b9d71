"""Helpers of the command-domain tests (a module of its own name: `from conftest import` found
another directory's conftest once the whole suite had loaded it): a small copy of the CPU example (examples/command/
window_sums) with sizes and timing cut down so one evaluation takes a second or two, and an
evaluator over the local executor on the CPU (the real sandbox)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "command" / "window_sums"

SMALL_TOML = """
name = "window_sums_small"
description = "Sums of every window of w consecutive doubles."
docs = "docs"

[files]
editable = ["kernel.c", "flags.txt"]
fixed = ["main.c"]

[build]
command = "cc -O2 -o prog main.c kernel.c $(cat flags.txt)"
timeout_s = 60

[run]
command = "./prog {seed} {n} {w}"
timeout_s = 10

[inputs]
trials = 2

[inputs.sizes]
n = [3000, 6000]
w = { low = 16, high = 96, multiple_of = 2 }

[compare]
mode = "file"
file = "out.txt"
atol = 1e-9
rtol = 1e-9

[objective]
source = "json"
key = "time_ms"

[timing]
pairs = 6
runs = 2
warmup = 0

[forbid]
libraries = ["m"]
"""


def make_problem(root: Path, toml: str = SMALL_TOML, extra: Mapping[str, str] | None = None) -> Path:
    """The example's files under `root` with `toml` as problem.toml (and `extra` files written)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "main.c", root / "main.c")
    shutil.copytree(EXAMPLE / "reference", root / "reference")
    shutil.copytree(EXAMPLE / "docs", root / "docs")
    (root / "problem.toml").write_text(toml)
    for name, text in (extra or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def example_design(name: str) -> dict[str, str]:
    d = EXAMPLE / "designs" / name
    return {p.name: p.read_text() for p in sorted(d.iterdir())}


