"""The local executor: slots, capacity and per-slot settings; concurrent real evaluations."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from stratagem.config import environment
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.evaluation import executors
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.sandbox import SandboxResult, SandboxSettings
from stratagem.evaluation.service import Evaluator


class _Recorder:
    """Wraps a run_worker: counts how many runs overlap and remembers their settings."""

    def __init__(self, inner: Any = None, delay: float = 0.2) -> None:
        self.inner, self.delay = inner, delay
        self.active = self.max_active = self.calls = self.candidates = 0
        self.settings: list[SandboxSettings] = []

    async def __call__(self, request_json: str, settings: SandboxSettings) -> SandboxResult:
        self.active += 1
        self.calls += 1
        self.candidates += bool(json.loads(request_json).get("files"))  # a design, not the reference alone
        self.max_active = max(self.max_active, self.active)
        self.settings.append(settings)
        try:
            if self.inner is not None:
                return await self.inner(request_json, settings)
            await asyncio.sleep(self.delay)
            return SandboxResult(None, "fake", [], 0, None, False, self.delay, "", "", False, 0)
        finally:
            self.active -= 1


def _request(linear_problem, cfg):
    specs = [s for s in domain.validator_graph(linear_problem).specs if s.placement == "worker"]
    return domain.build_request(linear_problem, candidate_design("x = 1"), specs, cfg)


@pytest.mark.parametrize(("slots", "jobs"), [(1, 3), (2, 2), (2, 5), (3, 3)])
def test_capacity_is_honoured(slots, jobs, cpu_config, linear_problem, monkeypatch) -> None:
    rec = _Recorder()
    monkeypatch.setattr(executors, "run_worker", rec)
    cfg = cpu_config.model_copy(update={"cpu_slots": slots})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin"})
    assert ex.capacity == slots

    async def go() -> list[Any]:
        return await asyncio.gather(*(ex.submit(_request(linear_problem, cfg), 5.0) for _ in range(jobs)))

    out = asyncio.run(go())
    assert len(out) == jobs and rec.calls == jobs
    assert rec.max_active == min(slots, jobs)
    # every slot is back in the pool afterwards
    assert ex._free is not None and len(ex._free) == slots


def test_slots_have_their_own_caches_and_settings(cpu_config, linear_problem, monkeypatch, _isolated_cache) -> None:
    rec = _Recorder(delay=0.05)
    monkeypatch.setattr(executors, "run_worker", rec)
    cfg = cpu_config.model_copy(update={"cpu_slots": 2, "memory_limit_gb": 3.0, "max_response_bytes": 4096})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin", "GITHUB_TOKEN": "x"})

    async def go() -> list[Any]:
        return await asyncio.gather(*(ex.submit(_request(linear_problem, cfg), 7.5) for _ in range(2)))

    out = asyncio.run(go())
    slots = [s for s, _ in out]
    assert {s.index for s in slots} == {0, 1}
    assert all(s.device == "cpu" and s.physical == "cpu" for s in slots)
    # Both CPU slots share the CPU's one device lock (timing there excludes every other worker)
    assert len({s.lock_path for s in slots}) == 1 and slots[0].lock_path.is_relative_to(_isolated_cache)
    assert all(s.timing_cores == () and s.reserved_cores == () for s in slots)
    dirs = [s.caches for s in slots]  # each slot's compile caches (the request's domain names them)
    assert dirs[0] != dirs[1]
    for s in slots:
        assert s.env["CUDA_VISIBLE_DEVICES"] == ""
        assert s.caches is not None and s.caches.is_relative_to(_isolated_cache)
    assert {st.cache_dir for st in rec.settings} <= set(dirs)
    for st in rec.settings:
        assert st.timeout_s == 7.5
        assert st.memory_limit_bytes == 3 * 2**30
        assert st.max_response_bytes == 4096
        assert st.network == cfg.network
        assert st.base_env["PATH"] == "/usr/bin"  # scrubbing is the sandbox's job, not the slot's


@pytest.mark.parametrize("slots", [2, 1])
def test_concurrent_real_evaluations(slots, cpu_config, linear_problem, fixtures, monkeypatch) -> None:
    """Two designs submitted at once both finish with their own verdicts; overlap == slots."""
    rec = _Recorder(inner=executors.run_worker)
    monkeypatch.setattr(executors, "run_worker", rec)
    cfg = cpu_config.model_copy(update={"cpu_slots": slots})
    ex = LocalExecutor.for_devices(["cpu"], cfg, environment())
    evaluator = Evaluator(cfg, ex, "cpu")
    good = candidate_design((fixtures / "candidates" / "good_addmm.py").read_text())
    wrong = candidate_design((fixtures / "candidates" / "wrong_scale.py").read_text())

    async def go() -> list[Any]:
        return await asyncio.gather(
            evaluator.evaluate(linear_problem, good, with_baseline=False),
            evaluator.evaluate(linear_problem, wrong, with_baseline=False),
        )

    ev_good, ev_wrong = asyncio.run(go())
    assert rec.candidates == 2  # (the first evaluation in a session may also calibrate the peaks)
    assert rec.max_active == slots
    assert ev_good.design.id == good.id and ev_good.verdict.status == "valid", ev_good.verdict.report()
    assert ev_wrong.design.id == wrong.id and ev_wrong.verdict.status == "invalid"
    bad = ev_wrong.verdict.result("correctness")
    assert bad is not None and bad.kind == "wrong_output"


def test_executor_can_be_reused_across_event_loops(cpu_config, linear_problem, monkeypatch) -> None:
    monkeypatch.setattr(executors, "run_worker", _Recorder(delay=0.02))
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, {})  # cpu_slots=1

    async def go() -> None:
        await asyncio.gather(*(ex.submit(_request(linear_problem, cpu_config), 5.0) for _ in range(2)))

    asyncio.run(go())
    asyncio.run(go())
