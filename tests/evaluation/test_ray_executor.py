"""The Ray executor (issue 29) against a local Ray cluster on the CPU, started by these tests:
a request runs in the same sandboxed worker as with the local executor, its slot names the
node; a runner killed mid-request is replaced and the request redone once; a request whose
runner dies twice is a failure said as such, never a lost or doubled evaluation."""

from __future__ import annotations

import asyncio
import platform
import threading
import time
from pathlib import Path

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import make_executor
from stratagem.evaluation.service import Evaluator

ray = pytest.importorskip("ray")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "paired"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             namespace="stratagem-tests")
    yield
    ray.shutdown()


@pytest.fixture
def executor(cluster, cpu_config, tmp_path):
    cfg = cpu_config.model_copy(update={"executor": "ray", "cache_dir": tmp_path / "cache", "ray_actors": 1})
    ex = make_executor(cfg, {})
    yield cfg, ex
    asyncio.run(ex.aclose())


def _evaluate(cfg, ex):
    problem = load_problem(FIX / "problem.py")
    design = candidate_design((FIX / "same.py").read_text())
    return asyncio.run(Evaluator(cfg, ex, ex.devices()[0]).evaluate(problem, design, with_baseline=False))


def _kill_when_busy(ex, times: int) -> threading.Thread:
    """Kill the runner's actor once its request has run a second, `times` times."""
    def go() -> None:
        for _ in range(times):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(r["busy"] for r in ex.runners()):
                time.sleep(0.1)
            time.sleep(1.0)
            handle = ex._runners[0].handle
            ray.kill(handle, no_restart=True)
            while time.monotonic() < deadline and ex._runners[0].handle is handle:
                time.sleep(0.1)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_a_request_runs_in_the_sandboxed_worker_on_a_ray_node(executor) -> None:
    cfg, ex = executor
    assert ex.capacity == cfg.cpu_slots and ex.devices() == ["cpu"]
    ev = _evaluate(cfg, ex)
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert [r.name for r in ev.verdict.results][:3] == ["static_checks", "load", "correctness"]
    assert ev.environment["host"] == platform.node() and ev.environment["physical_device"] == "cpu"
    assert ev.sandbox["returncode"] == 0 and ev.speedup is not None
    runner = ex.runners()[0]
    assert runner["lost"] == 0 and runner["busy"] == 0


def test_a_runner_killed_mid_request_is_replaced_and_the_request_redone_once(executor) -> None:
    cfg, ex = executor
    pid = ex.runners()[0]["pid"]
    killer = _kill_when_busy(ex, 1)
    ev = _evaluate(cfg, ex)
    killer.join(timeout=60)
    assert ev.verdict.status == "valid", ev.verdict.report()
    runner = ex.runners()[0]
    assert runner["lost"] == 1 and runner["pid"] != pid and runner["busy"] == 0


def test_a_request_whose_runner_dies_twice_fails_saying_why(executor) -> None:
    cfg, ex = executor
    killer = _kill_when_busy(ex, 2)
    ev = _evaluate(cfg, ex)
    killer.join(timeout=60)
    assert ev.verdict.status != "valid"
    report = ev.verdict.report()
    assert "Ray runner" in report and "lost" in report, report
    assert ex.runners()[0]["lost"] == 2


def test_a_design_that_builds_goes_through_the_runners_prebuild(executor) -> None:
    """The driver asks a runner's node for the CPU build (`NodeRunner.prebuild`); a CPU-only
    node has no GPU to build for, so nothing is built and the evaluation is the usual one."""
    cfg, ex = executor
    problem = load_problem(FIX / "problem.py")
    source = "# builds with load_inline (named here only)\n" + (FIX / "same.py").read_text()
    ev = asyncio.run(Evaluator(cfg, ex, ex.devices()[0]).evaluate(problem, candidate_design(source),
                                                                  with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert "prebuild" not in ev.environment
    from stratagem.domains import get_domain

    request = get_domain("pytorch").prebuild(problem, candidate_design(source), cfg)
    assert request is not None
    assert asyncio.run(ex.prebuild(request, 60.0)) is None  # the actor's own prebuild ran, found no GPU
    assert ex.runners()[0]["lost"] == 0
