"""Workers started ahead (`evaluation/spares.py`): the next request of a slot runs in a spare
that has already imported the worker's modules, with the same verdict; a spare serves one
request; none is left running after the executor closes or its event loop ends; a request
that runs alone has no spare beside it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from stratagem.config import environment
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.evaluation import executors, spares
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.sandbox import Ahead, SandboxResult, SandboxSettings, ahead_key
from stratagem.evaluation.service import Evaluator


def _gone(pid: int) -> bool:
    """The process has ended (or is a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except FileNotFoundError:
        return True


async def _ready(ex: LocalExecutor, timeout_s: float = 60.0) -> list[int]:
    """The pids of the executor's ready spares, once there is one."""
    t0 = time.monotonic()
    while not ex.spares.pids():
        assert time.monotonic() - t0 < timeout_s, "no spare became ready"
        await asyncio.sleep(0.05)
    return ex.spares.pids()


def test_a_stream_runs_in_spares_with_the_same_verdicts(cpu_config, linear_problem, fixtures, monkeypatch) -> None:
    """The second and third designs run in workers started ahead; verdicts as in fresh ones;
    the executor's close leaves no spare running."""
    ran: list[bool] = []
    real = executors.run_worker

    async def recording(request_json: str, settings: SandboxSettings, ahead: Ahead | None = None) -> SandboxResult:
        result = await real(request_json, settings, ahead)
        ran.append(result.ahead)
        return result

    monkeypatch.setattr(executors, "run_worker", recording)
    cfg = cpu_config.model_copy(update={"spare_workers": "always"})
    ex = LocalExecutor.for_devices(["cpu"], cfg, environment())
    evaluator = Evaluator(cfg, ex, "cpu")
    good = candidate_design((fixtures / "candidates" / "good_addmm.py").read_text())
    wrong = candidate_design((fixtures / "candidates" / "wrong_scale.py").read_text())
    left: list[int] = []

    async def go() -> list[Any]:
        out = [await evaluator.evaluate(linear_problem, good, with_baseline=False)]
        await _ready(ex)
        out.append(await evaluator.evaluate(linear_problem, wrong, with_baseline=False))
        await _ready(ex)
        out.append(await evaluator.evaluate(linear_problem, good, with_baseline=False))
        left.extend(await _ready(ex))
        await ex.aclose()
        return out

    first, bad, again = asyncio.run(go())
    assert ran[-2:] == [True, True] and ex.spares.served >= 2
    assert first.verdict.status == "valid" and again.verdict.status == "valid", again.verdict.report()
    assert bad.verdict.status == "invalid" and bad.verdict.result("correctness").kind == "wrong_output"
    assert left and all(_gone(p) for p in left), "a spare outlived the executor's close"


class _FakeStarts:
    """`start_ahead` starting `sleep` processes: the spares' bookkeeping without torch."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.started = tmp, 0

    async def __call__(self, request_json: str, settings: SandboxSettings, device: str, lock_path: str | None,
                       avoid_cores: tuple[int, ...] = ()) -> Ahead:
        self.started += 1
        n = self.started
        proc = await asyncio.create_subprocess_exec("sleep", "60", stdin=asyncio.subprocess.PIPE, start_new_session=True)
        work = self.tmp / f"spare{n}"
        work.mkdir()
        return Ahead(ahead_key(request_json, settings), proc, work, f"m{os.getpid()}-{n}", False)


def _request(linear_problem, cfg, alone: bool = False):
    specs = [s for s in domain.validator_graph(linear_problem).specs if s.placement == "worker"]
    req = domain.build_request(linear_problem, candidate_design("x = 1"), specs, cfg)
    return req.model_copy(update={"alone": alone})


def test_a_request_alone_has_no_spare_beside_it(cpu_config, linear_problem, monkeypatch, tmp_path) -> None:
    starts = _FakeStarts(tmp_path)
    monkeypatch.setattr(spares, "start_ahead", starts)
    seen: list[list[int]] = []

    async def fake_run(request_json: str, settings: SandboxSettings, ahead: Ahead | None = None) -> SandboxResult:
        if ahead is not None:
            ahead.kill()  # it served (here: ended) its one request
        seen.append(ex.spares.pids())
        await asyncio.sleep(0.1)  # the two first requests overlap: one in each slot
        return SandboxResult(None, "fake", [], 0, None, False, 0.01, "", "", False, 0, ahead=ahead is not None)

    monkeypatch.setattr(executors, "run_worker", fake_run)
    cfg = cpu_config.model_copy(update={"spare_workers": "always", "cpu_slots": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin"})
    pids: list[int] = []

    async def go() -> list[SandboxResult]:
        out = []
        await asyncio.gather(*(ex.submit(_request(linear_problem, cfg), 5.0) for _ in range(2)))  # both slots
        t0 = time.monotonic()
        while len(ex.spares.pids()) < 2:
            assert time.monotonic() - t0 < 10, "no spare in each slot"
            await asyncio.sleep(0.01)
        pids.extend(ex.spares.pids())
        _slot, r = await ex.submit(_request(linear_problem, cfg, alone=True), 5.0)
        out.append(r)
        assert all(_gone(p) for p in pids), "a spare was alive while a request ran alone"
        _slot, r = await ex.submit(_request(linear_problem, cfg), 5.0)  # spares start again after it
        out.append(r)
        await ex.aclose()
        return out

    alone, after = asyncio.run(go())
    assert not alone.ahead and seen[2] == []
    assert not after.ahead  # its slot's spare was killed for the alone run; the next one is starting
    assert starts.started == 3


def test_a_spare_serves_only_requests_of_its_kind(cpu_config, linear_problem, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(spares, "start_ahead", _FakeStarts(tmp_path))
    pool = spares.Spares()
    cfg = cpu_config.model_copy(update={"spare_workers": "always"})
    req = _request(linear_problem, cfg).model_dump_json()
    base = SandboxSettings(timeout_s=5, base_env={"PATH": "/usr/bin"}, cache_dir=tmp_path / "caches")
    other = SandboxSettings(timeout_s=5, base_env={"PATH": "/usr/bin"}, cache_dir=tmp_path / "caches",
                            memory_limit_bytes=1 << 30)

    async def go() -> tuple[Any, Any, list[int]]:
        pool.start(0, req, base, "cpu", None)
        while not pool.pids():
            await asyncio.sleep(0.01)
        miss = pool.take(0, req, other)  # another limit: another process
        hit = pool.take(0, req, base)
        left = pool.pids()
        if hit is not None:
            hit.kill()
        return miss, hit, left

    miss, hit, left = asyncio.run(go())
    assert miss is None and hit is not None and left == [] and pool.served == 1


def test_a_spare_dies_with_the_event_loop_that_started_it(cpu_config, linear_problem, monkeypatch, tmp_path) -> None:
    """An executor nobody closed: the loop's end kills its spares (no process is leaked)."""
    monkeypatch.setattr(spares, "start_ahead", _FakeStarts(tmp_path))
    pool = spares.Spares()
    req = _request(linear_problem, cpu_config).model_dump_json()
    settings = SandboxSettings(timeout_s=5, base_env={"PATH": "/usr/bin"})

    async def go() -> list[int]:
        pool.start(0, req, settings, "cpu", None)
        while not pool.pids():
            await asyncio.sleep(0.01)
        return pool.pids()

    pids = asyncio.run(go())
    assert pids and all(_gone(p) for p in pids)


@pytest.mark.parametrize("word", [b"", b"stop\n"])
def test_a_worker_started_ahead_and_not_needed_ends(word: bytes, tmp_path) -> None:
    """The real `--ahead` worker: its module imported, it waits; closed without `go`, it ends at once, 0."""
    import subprocess
    import sys

    io = tmp_path / ".stratagem"
    io.mkdir()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "stratagem.evaluation.worker", "--ahead", "json", "cpu", "-",
                             str(io / "request.json"), str(io / "response.json"), str(io / "progress.jsonl")],
                            stdin=subprocess.PIPE, cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    out = proc.communicate(word, timeout=30)
    assert proc.returncode == 0 and out == (None, None) and time.monotonic() - t0 < 30
    assert not (io / "response.json").exists()
