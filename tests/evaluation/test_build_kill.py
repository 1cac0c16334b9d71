"""Builds and limits with real C++ extensions (slow: each builds one with load_inline).

- An evaluation killed mid-build (its worker's group killed while the compilers run) leaves
  torch's build baton behind; a later evaluation of the same source must build and pass, not
  wait on the baton until the compile limit (issue 23: it slept 40 minutes later, every time).
- A hang inside the extension's own function is running: cut at the run limit, while the
  build before it was charged to compiling."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.phases import is_compiler
from stratagem.evaluation.service import Evaluator

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "builds"
PROBLEM = ROOT / "tests" / "fixtures" / "problem_relu.py"


def _compilers_running() -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if is_compiler(text[text.find("(") + 1:text.rfind(")")]):
            return True
    return False


def _evaluator(cfg, cache: Path) -> Evaluator:
    cfg = cfg.model_copy(update={"cache_dir": str(cache), "correctness_trials": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    return Evaluator(cfg, ex, "cpu")


def test_an_evaluation_killed_mid_build_does_not_block_the_next(cpu_config, tmp_path) -> None:
    design = candidate_design((FIX / "ext_relu.py").read_text())
    problem = load_problem(PROBLEM)

    async def killed() -> None:
        task = asyncio.create_task(_evaluator(cpu_config, tmp_path).evaluate(problem, design, with_baseline=False))
        deadline = time.monotonic() + 240
        # its baton appears as its build starts; then the compilers run (seconds of g++)
        while not list(tmp_path.rglob("builds_relu_ext*/lock")) and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        while not _compilers_running() and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        assert not task.done(), "the build ended before it could be killed"
        await asyncio.sleep(0.5)  # mid-build
        task.cancel()  # kills the worker's group, compilers included
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(killed())
    batons = list(tmp_path.rglob("builds_relu_ext*/lock"))
    assert batons, "the killed build left no baton: this test no longer tests what it should"
    # waiting on the dead build's baton would sleep until the compile limit and fail the
    # evaluation; a rebuild takes 100-220 s on a loaded 2-core machine, so the limit is roomy
    ev = asyncio.run(_evaluator(cpu_config.model_copy(update={"compile_timeout_s": 600.0}), tmp_path)
                     .evaluate(problem, design, with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    load = ev.verdict.result("load")
    assert load is not None and load.details.get("stale_build_locks_removed"), load.details


def test_a_hang_inside_an_extension_is_running_and_its_build_is_compiling(cpu_config, tmp_path) -> None:
    design = candidate_design((FIX / "ext_hang.py").read_text())
    ev = asyncio.run(_evaluator(cpu_config.model_copy(update={"timeout_s": 10.0, "compile_timeout_s": 300.0}),
                                tmp_path).evaluate(load_problem(PROBLEM), design, with_baseline=False))
    f = ev.verdict.failures[0]
    assert f.kind == "timeout" and "10 s run limit" in (f.reason or ""), f.reason
    compiled = float((f.reason or "").split("compiled ")[1].split(" s")[0])
    assert compiled >= 5, f.reason  # the build (seconds of g++) went to the compile limit
