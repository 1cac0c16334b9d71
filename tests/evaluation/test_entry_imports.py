"""Workers and judges load only what they run (issue 61): every built-in domain's worker and
judge module imports in a fresh interpreter where pydantic, typer and rich cannot load (a GPU
host may have nothing but torch), within a count of stratagem modules and with nothing of the
parent's layers; and `stratagem eval`'s parent imports stay bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stratagem
from stratagem.domains import BUILTIN, get_domain

SRC = str(Path(stratagem.__file__).resolve().parents[1])
BLOCKED = ("pydantic", "pydantic_ai", "typer", "rich")
LIMITS = {"worker": 40, "judge": 30}
"""The most stratagem modules a worker or judge process may load to import its module."""
PARENT_ONLY = ("stratagem.config", "stratagem.domains.base", "stratagem.search", "stratagem.report",
               "stratagem.store", "stratagem.agents", "stratagem.context", "stratagem.cli", "stratagem.mcp")
EVAL_PARENT = ("stratagem.cli", "stratagem.cli.evaluate", "stratagem.evaluation.api", "stratagem.report.live",
               "stratagem.domains.pytorch.domain")
"""What `stratagem eval` imports in the parent for a PyTorch design."""
PARENT_LIMIT = 62


def _loaded(modules: tuple[str, ...], blocked: tuple[str, ...] = ()) -> list[str]:
    """The stratagem modules a fresh interpreter loads to import `modules`, with `blocked`
    made unimportable."""
    code = (f"import json, sys\nfor m in {blocked!r}: sys.modules[m] = None\nfor m in {modules!r}: __import__(m)\n"
            "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] == 'stratagem')))")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


ENTRY_POINTS = [(kind, module) for name in BUILTIN for kind, module in (
    ("worker", get_domain(name).worker.module), ("judge", get_domain(name).worker.judge_module)) if module]


@pytest.mark.parametrize(("kind", "module"), ENTRY_POINTS)
def test_a_worker_or_judge_loads_only_what_it_runs(kind: str, module: str) -> None:
    loaded = _loaded((f"stratagem.evaluation.{kind}", module), BLOCKED)
    assert len(loaded) <= LIMITS[kind], f"{module} loads {len(loaded)} stratagem modules: {loaded}"
    assert not [m for m in loaded if m.startswith(PARENT_ONLY)], loaded


def test_every_built_in_domain_names_its_worker() -> None:
    assert {m for _, m in ENTRY_POINTS} >= {"stratagem.domains.pytorch.worker.stages",
                                           "stratagem.domains.pytorch.worker.judge",
                                           "stratagem.domains.command.worker"}


def test_the_eval_parent_loads_no_store_search_or_agents() -> None:
    loaded = _loaded(EVAL_PARENT)
    assert len(loaded) <= PARENT_LIMIT, f"{len(loaded)} stratagem modules: {loaded}"
    # the store only with --run-dir (opened where an evaluation is recorded), nothing of the search
    assert not [m for m in loaded if m.startswith(("stratagem.search", "stratagem.store", "stratagem.core.search",
                                                   "stratagem.agents", "stratagem.context"))], loaded


def test_each_command_is_registered_by_the_module_the_cli_imports_for_it() -> None:
    """`stratagem CMD` imports only `COMMANDS[CMD]`'s module: every command `app` has must be
    registered there (a command missing from the map still runs: every module is imported)."""
    from stratagem.cli import COMMANDS, register
    from stratagem.cli.common import app

    register([])
    found = {(c.name or ""): c.callback.__module__ for c in app.registered_commands if c.callback}
    found |= {(g.name or ""): c.callback.__module__ for g in app.registered_groups if g.typer_instance
              for c in g.typer_instance.registered_commands if c.callback}  # `analyze`
    assert found == {name: f"stratagem.cli.{module}" for name, module in COMMANDS.items()}
