"""Builds on CPU workers before a design takes a GPU slot (issue 29, item 4; issue 28, item 2):
a design that builds a C++/CUDA extension is first built by a `prebuild` worker, outside every
slot and device lock, into the shared build cache; its evaluation then loads the extension
from the cache. Here on the CPU: the executor's choice of slot and architecture (a GPU's, read
with nvidia-smi) is stood in for, the worker and the sandbox are the real ones."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import HarnessError
from stratagem.evaluation.executors import LocalExecutor, PinnedExecutor
from stratagem.evaluation.service import Evaluator

FIX = Path(__file__).resolve().parents[1] / "fixtures"
ENV = {"PATH": "/usr/bin:/bin"}
HONEST = """import torch
import torch.nn as nn
# a design that names load_inline (here only in this comment) is built ahead


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""


class Prebuilding(LocalExecutor):
    """The CPU slot standing in for a GPU's: `prebuild` runs the real prebuild worker for it."""

    calls: list[str]
    fail: bool = False

    async def prebuild(self, request, timeout_s, device=None):  # type: ignore[no-untyped-def]
        self.calls.append("prebuild")
        if self.fail:
            raise HarnessError("the build worker could not start")
        return await self._run_prebuild(request, timeout_s, self.slots[0], "90")

    async def submit(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        self.calls.append("submit")
        return await super().submit(*args, **kwargs)


def _executor(cfg) -> Prebuilding:  # type: ignore[no-untyped-def]
    ex = Prebuilding(LocalExecutor.for_devices(["cpu"], cfg, ENV).slots, cfg, ENV)
    ex.calls = []
    return ex


@pytest.fixture
def cfg(cpu_config, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "cache"))
    return cpu_config.model_copy(update={"correctness_trials": 2})


def test_a_design_that_builds_is_prebuilt_before_it_takes_a_slot(cfg) -> None:
    ex = _executor(cfg)
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / "problem_relu.py"),
                                                        candidate_design(HONEST), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.reason
    assert ex.calls[0] == "prebuild" and "submit" in ex.calls[1:]
    pre = ev.environment["prebuild"]
    assert pre["outcome"] == "passed" and pre["builds"] == [] and not pre["timed_out"], pre

    plain = HONEST.replace("names load_inline (here only in this comment) is", "without a build is not")
    ex.calls.clear()
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / "problem_relu.py"),
                                                        candidate_design(plain), with_baseline=False))
    assert "prebuild" not in ex.calls and "prebuild" not in ev.environment


def test_a_failed_prebuild_costs_only_the_attempt(cfg) -> None:
    ex = _executor(cfg)
    ex.fail = True
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / "problem_relu.py"),
                                                        candidate_design(HONEST), with_baseline=False))
    assert ev.verdict.status == "valid"
    assert "could not start" in ev.environment["prebuild"]["error"]


def test_a_cpu_executor_has_no_prebuild_and_a_pinned_one_passes_its_device(cfg) -> None:
    ex = LocalExecutor.for_devices(["cpu"], cfg, ENV)
    assert asyncio.run(ex.prebuild(None, 1.0)) is None  # type: ignore[arg-type] - no GPU: nothing runs
    seen: list[Any] = []

    class Inner(LocalExecutor):
        async def prebuild(self, request, timeout_s, device=None):  # type: ignore[no-untyped-def]
            seen.append(device)

    inner = Inner(ex.slots, cfg, ENV)
    asyncio.run(PinnedExecutor(inner, "cpu").prebuild(None, 1.0))  # type: ignore[arg-type]
    assert seen == ["cpu"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_prebuilt_extension_is_what_the_evaluation_loads(cfg) -> None:
    """A real C++ `load_inline` build: the prebuild worker builds and publishes it, and the
    evaluation's own worker loads it from the cache under the same key (no second build)."""
    ex = _executor(cfg.model_copy(update={"compile_timeout_s": 900}))
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / "problem_relu.py"),
                                                        candidate_design((FIX / "builds" / "ext_relu.py").read_text()),
                                                        with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.reason
    built = ev.environment["prebuild"]["builds"]
    assert [b["outcome"] for b in built] == ["built"], ev.environment["prebuild"]
    load = next(r for r in ev.verdict.results if r.name == "load")
    loaded = load.details["builds"]
    assert [b["outcome"] for b in loaded] == ["hit"] and loaded[0]["key"] == built[0]["key"]


def test_prebuild_when_busy_runs_only_when_no_slot_of_the_gpu_is_free(cfg, monkeypatch) -> None:
    """`[evaluation] prebuild = "when_busy"` (the default): a design that would take a free GPU
    slot at once builds there (no second worker); one that would wait builds meanwhile on a CPU
    build worker; `always` and `never` do as they say."""
    from stratagem.evaluation import executors
    from stratagem.evaluation.slots import Slot

    ran: list[str] = []

    async def fake_run(self, request, timeout_s, slot, arch):  # type: ignore[no-untyped-def]
        ran.append(arch)
        return "built"

    monkeypatch.setattr(executors.LocalExecutor, "_run_prebuild", fake_run)
    monkeypatch.setattr(executors, "gpu_capability", lambda _d: "90")
    gpu = Slot(0, "cuda", "cuda:0", {}, None, (), (), "host")

    async def scenario(ex: LocalExecutor) -> list[object]:
        out = [await ex.prebuild(None, 1.0)]  # type: ignore[arg-type] - the one slot is free
        taken = await ex._take("cuda:0")
        out.append(await ex.prebuild(None, 1.0))  # type: ignore[arg-type] - it is taken: build meanwhile
        await ex._give(taken)
        return out

    for mode, want in (("when_busy", [None, "built"]), ("always", ["built", "built"]), ("never", [None, None])):
        ran.clear()
        ex = LocalExecutor([gpu], cfg.model_copy(update={"prebuild": mode}), ENV)
        assert asyncio.run(scenario(ex)) == want, mode
        assert len(ran) == want.count("built")
