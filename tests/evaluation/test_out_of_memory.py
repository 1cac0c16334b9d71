"""Running out of memory: an evaluation whose worker ran out of memory runs again alone on
the device (the memory may have been other workers'), and the second verdict is the design's;
a reference that runs out of memory is not a broken problem; the judge's and the trials'
reductions over an output take no temporary of its size (real workers on the CPU)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch

from stratagem.domains.pytorch.worker import compare, params
from stratagem.evaluation.executors import LocalExecutor
from stratagem.search.budget import evaluation_seconds
from stratagem.worker_api.device_lock import DeviceLock
from stratagem.worker_api.device_use import DeviceUse


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """`alone` of every design's request the local executor runs, in order (not the reference's
    own workers: the device's peaks, baselines)."""
    seen: list[bool] = []
    real = LocalExecutor.submit

    async def submit(self: LocalExecutor, request: Any, *a: Any, **kw: Any) -> Any:
        if request.lock_owner.get("label") != "baselines":
            seen.append(request.alone)
        return await real(self, request, *a, **kw)

    monkeypatch.setattr(LocalExecutor, "submit", submit)
    return seen


def test_a_design_that_ran_out_of_memory_beside_others_is_judged_by_its_run_alone(evaluate, h, asked, tmp_path) -> None:
    marker = tmp_path / "ran-out-once"
    ev = evaluate(h.make_candidate(forward=f"""
        import pathlib
        mark = pathlib.Path({str(marker)!r})
        if not mark.exists():
            mark.write_text("out")
            raise MemoryError("out of memory: another worker holds the device's memory")
    """))
    assert marker.exists()
    assert asked == [False, True]
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.environment["alone"] is True and ev.to_record().environment["alone"] is True
    # the first worker's time is spent too: the GPU-seconds budget counts it
    earlier = ev.environment["earlier_runs_s"]
    assert earlier > 0
    assert evaluation_seconds(ev.to_record()) >= earlier + sum(r.duration_s for r in ev.verdict.results)


def test_a_design_that_runs_out_of_memory_alone_too_is_oom_after_one_more_run(evaluate, h, asked) -> None:
    ev = evaluate(h.make_candidate(forward='raise MemoryError("needs more than the device has")'))
    assert asked == [False, True]
    assert [f.kind for f in ev.verdict.failures] == ["oom"], ev.verdict.report()


def test_a_worker_alone_holds_the_device_exclusively_and_pins_only_its_timed_sections(tmp_path) -> None:
    path = str(tmp_path / "gpu.lock")
    use = DeviceUse({"device": "cpu", "timing_lock": path, "alone": True})
    other_in: list[float] = []

    def other() -> None:
        with DeviceLock(path).hold("shared"):
            other_in.append(time.monotonic())

    with use.hold("shared"):
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        assert not other_in  # a shared holder waits for a worker alone
        with use.hold("exclusive"):  # a timed section inside: no second take, no error
            pass
        left = time.monotonic()
    t.join(5)
    assert other_in and other_in[0] >= left
    assert [w.mode for w in use.windows] == ["exclusive"]


@pytest.mark.parametrize("shape, transpose", [((3000, 700), False), ((3000, 700), True), ((5,), False)])
def test_reductions_over_an_output_agree_with_the_whole_and_take_chunks(shape, transpose, monkeypatch) -> None:
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 10_000)
    base = torch.randn(*shape) * 3
    base.view(-1)[base.numel() // 2] = float("nan")
    t = base.t() if transpose else base
    pieces = compare.chunks(t)
    assert sum(p.numel() for p in pieces) == t.numel()
    assert all(p.numel() <= max(10_000, t[0].numel() if t.dim() else 1) for p in pieces)
    assert all(p.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for p in pieces)  # views, no copy
    whole = float(t.abs().nan_to_num(0, 0, 0).max())
    assert params.output_magnitude(t) == whole
    assert params.finite(t) == bool(torch.isfinite(t).all())
    assert params.output_magnitude((t, torch.tensor(-9.0), torch.ones(0))) == max(whole, 9.0)


def test_chunks_of_a_large_tensor_cover_it_in_order() -> None:
    t = torch.arange(25.0).reshape(5, 5)
    assert torch.equal(torch.cat([p.reshape(-1) for p in compare.chunks(t, 7)]), t.reshape(-1))
    assert torch.equal(torch.cat([p for p in compare.chunks(t.t(), 7)]), t.t())


class _Raises(torch.nn.Module):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def forward(self, *_inputs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize("error, kind", [(MemoryError("out of memory"), "oom"),
                                         (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB"), "oom"),
                                         (ValueError("shapes do not match"), "problem_error")])
def test_a_reference_that_runs_out_of_memory_is_not_a_broken_problem(tmp_path, error, kind) -> None:
    """The reference raising is the problem's fault (the run stops: no design can be judged),
    unless the memory ran out, which other work on the device may have taken: then the
    evaluation runs again alone like any other that ran out."""
    from stratagem.domains.pytorch.worker.stages import Worker
    from stratagem.worker_api.stages import StageFailure

    w = Worker({"device": "cpu"}, tmp_path)
    with pytest.raises(StageFailure) as failed:
        w.call_reference(_Raises(error), [])
    assert failed.value.kind == kind
    assert "the reference Model raised" in failed.value.reason


def test_a_reference_worker_that_ran_out_of_memory_runs_again_alone(cpu_config, fixtures, tmp_path) -> None:
    """The baselines' worker (as any reference-only graph: peaks, audit, a confirmation block)
    runs again alone too: on a GPU shared by a suite's problems a baseline that ran out beside
    them would otherwise end the problem's run."""
    import asyncio

    from stratagem.domains.pytorch.problem import load_problem
    from stratagem.evaluation.service import Evaluator

    marker = tmp_path / "reference-ran-out-once"
    source = (fixtures / "problem_linear.py").read_text().replace(
        "    def forward(self, x):\n",
        f"    def forward(self, x):\n        import pathlib\n        mark = pathlib.Path({str(marker)!r})\n"
        "        if not mark.exists():\n            mark.write_text('out')\n"
        "            raise MemoryError('out of memory beside another worker')\n")
    path = tmp_path / "problem_linear_once.py"
    path.write_text(source)
    seen: list[bool] = []
    real = LocalExecutor.submit

    async def spy(self: LocalExecutor, request: Any, *a: Any, **kw: Any) -> Any:
        seen.append(request.alone)
        return await real(self, request, *a, **kw)

    LocalExecutor.submit = spy  # type: ignore[method-assign]
    try:
        evaluator = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"}), "cpu")
        base = asyncio.run(evaluator.baseline(load_problem(path), refresh=True))
    finally:
        LocalExecutor.submit = real  # type: ignore[method-assign]
    assert marker.exists() and seen == [False, True]
    assert base.reference_ms is not None and not base.verdict.failures, base.verdict.report()


GIB = 2**30


@pytest.mark.parametrize("worker_gib, judge_gib, room_gib, free_gib, cap_gib, kind", [
    (50.6, 24.0, 75.0, 78.0, 79.2, None),  # fits now
    (50.6, 24.0, 65.5, 65.5, 79.2, "oom"),  # the H100's ReLU beside its own baselines: fits alone
    (50.6, 24.0, 40.0, 40.0, 79.2, "oom"),  # another evaluation holds the rest
    (80.0, 24.0, 78.0, 78.0, 79.2, "problem_error"),  # more than the device has
    (50.6, 24.0, 30.0, 78.0, 31.0, "problem_error"),  # more than the per-process cap allows
])
def test_an_evaluation_that_would_fit_alone_is_out_of_memory_not_a_problem_that_cannot_fit(
        worker_gib, judge_gib, room_gib, free_gib, cap_gib, kind) -> None:
    from stratagem.domains.pytorch.worker.memory import shortfall

    b = [int(x * GIB) for x in (worker_gib, judge_gib, room_gib, free_gib)]
    assert shortfall(*b, total_b=int(79.18 * GIB), cap_b=int(cap_gib * GIB)) == kind


def test_the_run_alone_waits_for_the_callers_own_work_beside_it(monkeypatch) -> None:
    """A design's worker that ran out beside the baselines timed for it runs again only after
    they ended (`eval` on the H100: the plan saw 65.5 of 79.2 GiB free while they ran)."""
    import asyncio
    import types

    from stratagem.core.verdict import ValidatorResult
    from stratagem.evaluation import submit
    from stratagem.evaluation.outcome import BatchOutcome

    order: list[str] = []

    class Executor:
        async def submit(self, request: Any, *a: Any, **kw: Any) -> Any:
            order.append("alone" if request.alone else "first")
            return types.SimpleNamespace(physical="cuda:0"), types.SimpleNamespace(duration_s=4.0, alone=request.alone, answered=None)

    def interpret(specs: Any, sr: Any, *a: Any) -> BatchOutcome:
        kind = None if sr.alone else "oom"
        return BatchOutcome([ValidatorResult("load", "passed" if kind is None else "failed", None, kind)], {})

    async def baselines() -> None:
        await asyncio.sleep(0.2)
        order.append("baselines ended")

    monkeypatch.setattr(submit, "interpret", interpret)
    req = types.SimpleNamespace(alone=False, request_id="r", compile_stage="load",
                                model_copy=lambda update: types.SimpleNamespace(**{**vars(req), **update}))

    async def go() -> Any:
        return await submit.submitted(Executor(), req, [], 10.0, None, beside=asyncio.ensure_future(baselines()))  # type: ignore[arg-type]

    run = asyncio.run(go())
    assert order == ["first", "baselines ended", "alone"]
    assert run.request.alone and run.earlier_s == 4.0 and run.out.results[0].outcome == "passed"
