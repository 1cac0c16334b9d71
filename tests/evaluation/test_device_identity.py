"""Device identity per slot: an evaluation is stored with the device its worker ran on, the
roofline reads that device's peaks, and requests can be pinned to one device (two fake GPU
slots whose workers run on the CPU)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import ConfigError
from stratagem.evaluation.executors import LocalExecutor, make_executor
from stratagem.evaluation.results import Baseline
from stratagem.evaluation.service import Evaluator

FIX = Path(__file__).resolve().parents[1] / "fixtures"
ENV = {"PATH": "/usr/bin:/bin"}


class SpyExecutor(LocalExecutor):
    """Records the physical device of the slot each request ran in."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.ran: dict[str, str] = {}

    async def submit(self, request, *a, **kw):  # type: ignore[no-untyped-def,override]
        slot, result = await super().submit(request, *a, **kw)
        self.ran[request.request_id] = slot.physical
        return slot, result


def two_gpu_slots(cfg, tmp_path: Path) -> SpyExecutor:
    cpu = LocalExecutor.for_devices(["cpu"], cfg, ENV).slots[0]
    slots = [dataclasses.replace(cpu, index=i, physical=f"cuda:{i}", host="node-a",
                                 lock_path=tmp_path / f"gpu{i}.lock") for i in range(2)]
    return SpyExecutor(slots, cfg, ENV)


def test_each_evaluation_records_the_device_it_ran_on(cpu_config, tmp_path) -> None:
    """Two designs at once on a machine with two GPUs: one runs on cuda:0, the other on
    cuda:1, and each is stored with its own (all were stored as cuda:0 before)."""
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    ex = two_gpu_slots(cfg, tmp_path)
    evaluator = Evaluator(cfg, ex)
    assert evaluator.physical_device == "cuda:0"
    for i in range(2):  # distinct peaks per device, high enough that no floor binds
        path = evaluator.peaks.path(f"cuda:{i}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": domain.PEAKS_VERSION, "bandwidth_gbps": 1e6 * (i + 1),
                                    "cache_bandwidth_gbps": 1e6 * (i + 1), "matmul_tflops": {"float32": 1e6}}))
    problem = load_problem(FIX / "problem_linear.py")
    designs = [candidate_design((FIX / "candidates" / "good_addmm.py").read_text() + f"\n# copy {i}\n")
               for i in range(2)]

    async def both():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(evaluator.evaluate(problem, d, with_baseline=False) for d in designs))

    evs = asyncio.run(both())
    assert sorted(ev.device for ev in evs) == ["cuda:0", "cuda:1"]
    assert sorted(ex.ran.values()) == ["cuda:0", "cuda:1"]
    for ev in evs:
        assert ev.verdict.status == "valid", ev.verdict.report()
        assert ev.environment["physical_device"] == ev.device and ev.environment["host"] == "node-a"
        assert ev.to_record().device == ev.device
        roof = ev.verdict.result("roofline")
        assert roof is not None and roof.details["checked"]
        expected = 1e6 * (int(ev.device[-1]) + 1)  # the peaks of the device it ran on
        if roof.details.get("memory_floor") == "cache":
            expected *= 2  # CACHE_HEADROOM
        assert roof.details["bandwidth_gbps"] == expected


def test_a_request_pinned_to_a_device_waits_for_that_devices_slot(cpu_config, tmp_path) -> None:
    ex = two_gpu_slots(cpu_config, tmp_path)

    async def take() -> list[str]:
        a = await ex._take("cuda:1")
        b = await ex._take(None)  # the other one
        waiter = asyncio.create_task(ex._take("cuda:1"))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # cuda:1 is busy, cuda:0 is not what it asked for
        await ex._give(a)
        c = await asyncio.wait_for(waiter, 1)
        return [a.physical, b.physical, c.physical]

    assert asyncio.run(take()) == ["cuda:1", "cuda:0", "cuda:1"]
    with pytest.raises(ConfigError, match="no slot of this executor is on cuda:7"):
        asyncio.run(ex._take("cuda:7"))


@pytest.mark.parametrize("baseline_device, chained", [("NVIDIA H200", True), ("NVIDIA A100", False)])
def test_a_ratio_is_chained_only_through_a_baseline_of_the_same_device_kind(baseline_device, chained) -> None:
    """A design timed on an H200 gets no speedup "vs compile" from a baseline measured on
    another kind of GPU: the chain would mix two machines' numbers."""
    from stratagem.core.verdict import ValidatorResult, Verdict
    from stratagem.evaluation.results import Evaluation

    timing = {"runtime": {"median_ms": 0.5, "q1_ms": 0.5, "q3_ms": 0.5}, "reference": {"median_ms": 1.0},
              "speedup": {"ratio": 2.0, "low": 1.9, "high": 2.1, "pairs": 10}}
    verdict = Verdict((ValidatorResult("timing", "passed", details=timing),))
    base = Baseline("p", {"eager": {"median_ms": 1.0},
                          "compile": {"median_ms": 0.8, "vs_eager": {"ratio": 1.25, "low": 1.2, "high": 1.3}}},
                    {"device_name": baseline_device}, False, Verdict(()), "eager")
    ev = Evaluation(load_problem(FIX / "paired" / "problem.py"), candidate_design("x"), verdict, "cuda:1", {"device_name": "NVIDIA H200"}, (1,), base)
    assert ("compile" in ev.speedups) == chained
    assert ev.speedups["eager"].ratio == 2.0  # paired in its own worker: always there


def test_the_executor_comes_from_the_configuration(cpu_config) -> None:
    assert isinstance(make_executor(cpu_config, ENV), LocalExecutor)
    from stratagem.config import load_config

    with pytest.raises(Exception, match="executor"):
        load_config(None, {"evaluation": {"executor": "slurm"}})
