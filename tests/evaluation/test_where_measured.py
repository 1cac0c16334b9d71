"""Caches keyed by where they were measured (issue 29, item 2): baselines, device peaks and
compile caches belong to the worker's host and physical device, never the parent's host name,
so two machines never share one. Fake hosts: CPU slots named `node-a` and `node-b`, and queue
worker processes that call their machine `node-b` and `node-c`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import DOMAIN as PYTORCH
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator, read_design
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.ray_executor import NodeRunner
from stratagem.evaluation.service import Evaluator
from stratagem.evaluation.slots import make_slots

FIX = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
ENV = {"PATH": "/usr/bin:/bin"}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own cache folder (not the session's, where other tests keep the entries
    of this machine and of their own fake hosts), so it sees the hosts it measured and no more."""
    d = tmp_path / "stratagem-cache"
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(d))
    return d


class Elsewhere(LocalExecutor):
    """A CPU slot on machine `host` that, like a queue or Ray executor, does not say before a
    request runs where it will run."""

    def host(self) -> str | None:
        return None


def on(host: str, cfg) -> Elsewhere:  # type: ignore[no-untyped-def]
    cpu = LocalExecutor.for_devices(["cpu"], cfg, ENV).slots[0]
    return Elsewhere([dataclasses.replace(cpu, host=host)], cfg, ENV)


def cached_hosts(root: Path) -> list[str]:
    out = []
    for p in (root / "baselines").glob("*.json"):
        body = json.loads(p.read_text())
        if "environment" in body:
            out.append(body["environment"]["host"])
    return sorted(out)


def judge_timing(root: Path, host: str, verdict: str) -> None:
    """Make the timing of `host`'s cached baselines `verdict` (`stable` or `unstable`)."""
    for p in (root / "baselines").glob("*.json"):
        body = json.loads(p.read_text())
        if body.get("environment", {}).get("host") == host:
            for mode in body["modes"].values():
                mode["stability"] = {"verdict": verdict, "reasons": ["set by the test"] if verdict == "unstable" else []}
            p.write_text(json.dumps(body))


def test_two_hosts_never_share_a_baseline(cpu_config, _isolated_cache) -> None:
    """A baseline measured on node-a is kept under node-a; an evaluation that runs on node-b
    does not reuse it (its own is measured there), and node-a's is found again for node-a."""
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    problem = load_problem(FIX / "problem_linear.py")
    design = candidate_design((FIX / "candidates" / "good_addmm.py").read_text())
    first = asyncio.run(Evaluator(cfg, on("node-a", cfg), "cpu").evaluate(problem, design))
    assert first.verdict.status == "valid", first.verdict.report()
    assert first.baseline is not None and first.baseline.environment["host"] == "node-a"
    assert cached_hosts(_isolated_cache) == ["node-a"]

    second = asyncio.run(Evaluator(cfg, on("node-b", cfg), "cpu").evaluate(problem, design))
    assert second.environment["host"] == "node-b"
    assert second.baseline is not None and second.baseline.environment["host"] == "node-b"
    assert not second.baseline.cached  # node-a's was found first, and refused
    assert cached_hosts(_isolated_cache) == ["node-a", "node-b"]

    # the latest baseline of any host (node-b's) unstable, as under load, node-a's stable: the
    # evaluation on node-a still finds node-a's own once its worker says where it ran, and
    # measures nothing (it once measured afresh whenever the latest of any host was unusable)
    judge_timing(_isolated_cache, "node-a", "stable")
    judge_timing(_isolated_cache, "node-b", "unstable")
    third = asyncio.run(Evaluator(cfg, on("node-a", cfg), "cpu").evaluate(problem, design))
    assert third.baseline is not None and third.baseline.cached
    assert third.baseline.environment["host"] == "node-a"
    assert third.baseline.median_ms("eager") == first.baseline.median_ms("eager")
    assert platform.node() not in cached_hosts(_isolated_cache)


def test_peaks_are_read_for_the_host_the_design_ran_on(cpu_config, _isolated_cache) -> None:
    """The roofline reads the peaks of the worker's host; peaks a worker of another host
    measured are kept for that host and never stand in for the one asked for."""
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    ev = Evaluator(cfg, on("node-a", cfg), "cpu")
    for host, rate in (("node-a", 1e6), ("node-b", 5e6)):
        path = ev.peaks.path("cpu", host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": domain.PEAKS_VERSION, "bandwidth_gbps": rate,
                                    "cache_bandwidth_gbps": rate, "matmul_tflops": {"float32": 1e6}}))
    assert ev.peaks.path("cpu", "node-a") != ev.peaks.path("cpu", "node-b")
    design = candidate_design((FIX / "candidates" / "good_addmm.py").read_text())
    out = asyncio.run(ev.evaluate(load_problem(FIX / "problem_linear.py"), design, with_baseline=False))
    roof = out.verdict.result("roofline")
    assert roof is not None and roof.details["checked"]
    assert roof.details["bandwidth_gbps"] in (1e6, 2e6)  # node-a's (doubled for a cache floor), not node-b's

    ev.peaks.path("cpu", "node-c").unlink(missing_ok=True)
    got = asyncio.run(ev.peaks.get(load_problem(FIX / "problem_linear.py"), PYTORCH.peaks, device="cpu", host="node-c"))
    assert got is None  # measured by node-a's worker: not node-c's
    assert not ev.peaks.path("cpu", "node-c").exists()
    assert json.loads(ev.peaks.path("cpu", "node-a").read_text())["bandwidth_gbps"] != 1e6  # node-a's, refreshed


def test_compile_caches_are_per_host_and_device(tmp_path) -> None:
    a = make_slots(["cpu", "cuda:0"], tmp_path, {}, "node-a")
    b = make_slots(["cpu", "cuda:0"], tmp_path, {}, "node-b")
    folders = [s.caches for s in a + b]  # each slot's compile caches (the domain's names them inside)
    assert None not in folders and len(set(folders)) == 4
    assert len({s.lock_path for s in a + b}) == 4


def test_a_ray_runner_off_the_drivers_host_keeps_its_own_cache_root(cpu_config, tmp_path, _isolated_cache) -> None:
    cfg = cpu_config.model_copy(update={"cache_dir": tmp_path / "driver"})
    here = NodeRunner(cfg.model_dump_json(), "cpu", platform.node() or "host")
    away = NodeRunner(cfg.model_dump_json(), "cpu", "the-driver-elsewhere")
    assert Path(str(here.executor.slots[0].caches)).is_relative_to(tmp_path / "driver")
    assert Path(str(away.executor.slots[0].caches)).is_relative_to(_isolated_cache)


def worker_on(host: str, queue: Path) -> subprocess.Popen:
    """A queue worker process whose machine calls itself `host`."""
    code = ("import platform, sys; platform.node = lambda: " + repr(host) + "\n"
            "from stratagem.evaluation.queue_worker import main\n"
            f"sys.exit(main(['--queue', {str(queue)!r}, '--device', 'cpu', '--poll-s', '0.1', '--max-seconds', '240']))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_a_queue_workers_host_keys_its_baseline_and_peaks(tmp_path, _isolated_cache) -> None:
    """Through the queue: the baseline and the peaks a worker on node-b measured are kept under
    node-b (not the parent's host); a later evaluation served by node-c measures its own."""
    from stratagem.config import load_config

    fast = {"device": "cpu", "baselines": ["eager"], "correctness_trials": 2, "executor": "queue",
            "queue_dir": str(tmp_path / "queue"), "queue_poll_s": 0.1,
            "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}
    cfg = load_config(None, {"evaluation": fast}).evaluation
    problem = load_problem(ROOT / "tests/adversarial/problems/linear_relu.py")
    design = read_design(ROOT / "tests/adversarial/honest/addmm_fused.py", problem)
    evs = []
    for host in ("node-b", "node-c"):
        w = worker_on(host, tmp_path / "queue")
        try:
            evs.append(asyncio.run(make_evaluator(cfg).evaluate(problem, design)))
        finally:
            w.kill()
            w.wait()
    for ev, host in zip(evs, ("node-b", "node-c"), strict=True):
        assert ev.verdict.status == "valid", ev.verdict.report()
        assert ev.environment["host"] == host
        assert ev.baseline is not None and ev.baseline.environment["host"] == host and not ev.baseline.cached
    assert cached_hosts(_isolated_cache) == ["node-b", "node-c"]
    assert sorted(p.name for p in (_isolated_cache / "peaks").glob("*.json")) == ["node-b-cpu.json", "node-c-cpu.json"]


class TwoHosts(LocalExecutor):
    """Two CPU slots on machines `node-a` and `node-b`, like a cluster's executor: where a
    request runs is known only when it answers."""

    def host(self) -> str | None:
        return None


def test_a_searchs_baseline_is_attached_only_on_its_own_host(cpu_config, _isolated_cache) -> None:
    """A search measures its baseline once per invocation, on one slot (node-a), and hands it
    to every evaluation. A design whose worker ran on node-b gets node-b's own baseline,
    measured afresh once for the invocation (not node-a's, nor an older cached one), and the
    next design on node-b reuses that one instead of measuring again."""
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    problem = load_problem(FIX / "problem_linear.py")
    design = candidate_design((FIX / "candidates" / "good_addmm.py").read_text())
    a = Evaluator(cfg, on("node-a", cfg), "cpu")
    search_baseline = asyncio.run(a.baseline(problem, refresh=True))
    assert search_baseline.environment["host"] == "node-a"

    cpu = LocalExecutor.for_devices(["cpu"], cfg, ENV).slots[0]
    b_only = TwoHosts([dataclasses.replace(cpu, host="node-b")], cfg, ENV)
    ev = Evaluator(cfg, b_only, "cpu")
    ev.baselines.fresh.update(a.baselines.fresh)  # the same evaluator measured node-a's: one search, two hosts
    first = asyncio.run(ev.evaluate(problem, design, baseline=search_baseline))
    assert first.environment["host"] == "node-b"
    assert first.baseline is not None and first.baseline.environment["host"] == "node-b"
    assert not first.baseline.cached
    second = asyncio.run(ev.evaluate(problem, design, baseline=search_baseline))
    assert second.baseline is first.baseline  # measured once for node-b in this invocation

    # on node-a, the search's own is attached as it is
    back = asyncio.run(a.evaluate(problem, design, baseline=search_baseline))
    assert back.baseline is search_baseline
