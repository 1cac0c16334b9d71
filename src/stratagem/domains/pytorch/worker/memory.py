"""Owns the GPU memory plan of an evaluation: what it needs, measured on one reference call,
against what this process and the device have, before any candidate call.

Worker-side only. The worker's peak is the integrity stage's: three input-sized tensors (the
inputs, their copy, the poisoned block) and three outputs (four with the judge: the copy it reads,
`ipc.py`), plus the reference's workspace (a correctness trial holds two of each); the judge, a process of its own, holds one call's
inputs, output and workspace beside it. The per-process cap (`gpu_memory_fraction`) bounds
each process; the device's free memory bounds both.

The plan holds only while no stage holds more than it counts: a correctness trial lets the
previous trial's inputs go before it draws its own, and an IPC copy is collected once the
judge has answered (`record.py`). Each stage reports its measured peak (`memory_peak_gb`),
which the GPU tests and `benchmarks/kernelbench_scale.py` hold against the plan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import runtime
from stratagem.domains.pytorch.worker.runtime import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

GIB = 2.0**30


def plan(w: StageContext) -> dict[str, Any]:
    """The plan of worker `w`'s evaluation (sizes in GiB).

    Raises:
        StageFailure: `problem_error` when the evaluation cannot fit, with the numbers."""
    p = w.loaded(need_candidate=False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    inputs = w.make_inputs(p, int(w.req["seeds"][0]))
    in_b = runtime.inputs_nbytes(inputs)
    with torch.no_grad():
        out = w.call_reference(p.reference, inputs)
    out_b = runtime.output_nbytes(out)
    work_b = max(0, torch.cuda.max_memory_allocated() - base - in_b - out_b)
    _poison(out)  # no right answer left in the memory the candidate's first call may get
    del inputs, out
    runtime.free_memory()
    cap = w.req.get("gpu_memory_fraction")
    worker_b = 3 * in_b + (4 if w.req.get("judge") else 3) * out_b + work_b  # + the judge's copy (ipc.py)
    judge_b = in_b + out_b + work_b if w.req.get("judge") else 0
    room = runtime.free_bytes(w.device, cap)  # the plan's call freed: what this process may add
    device_free = runtime.free_bytes(w.device)
    out_plan = {"inputs_gb": in_b / GIB, "output_gb": out_b / GIB, "reference_workspace_gb": work_b / GIB,
                "worker_needs_gb": worker_b / GIB, "judge_needs_gb": judge_b / GIB, "available_gb": room / GIB,
                "device_free_gb": device_free / GIB}
    if worker_b > room or worker_b + judge_b > device_free:
        under = f" under gpu_memory_fraction = {cap:g}" if cap else ""
        raise StageFailure("problem_error", (
            f"the problem does not fit on this GPU: an evaluation needs {worker_b / GIB:.1f} GiB in the worker "
            f"(inputs {in_b / GIB:.2f} GiB and outputs {out_b / GIB:.2f} GiB, three of each at the integrity "
            f"stage's peak, and the reference's workspace {work_b / GIB:.2f} GiB)"
            + (f" and {judge_b / GIB:.1f} GiB in the judge beside it" if judge_b else "")
            + f"; {room / GIB:.1f} GiB are available to the worker{under} and {device_free / GIB:.1f} GiB free "
            "on the device: evaluate it on a GPU with more free memory, or make get_inputs() smaller"),
            {"memory": out_plan})
    return out_plan


def _poison(out: Any) -> None:
    if isinstance(out, torch.Tensor):
        out.fill_(float("nan") if out.is_floating_point() else 0)
    elif isinstance(out, list | tuple):
        for x in out:
            _poison(x)


@contextlib.contextmanager
def stage_peak(device: str) -> Iterator[dict[str, Any]]:
    """On a GPU: the stage's peak of this process's allocated memory (GiB), filled in when the
    stage ends (`memory_peak_gb`), what the plan's `worker_needs_gb` must cover. Nothing
    elsewhere."""
    out: dict[str, Any] = {}
    if not device.startswith("cuda") or not torch.cuda.is_initialized():
        yield out
        return
    torch.cuda.reset_peak_memory_stats()
    yield out
    out.update(peak_now(device))


def peak_now(device: str) -> dict[str, Any]:
    """`memory_peak_gb`: the peak allocated since the stage began, on a GPU (a stage that ran
    out of memory reports it with its failure); {} elsewhere."""
    if not device.startswith("cuda") or not torch.cuda.is_initialized():
        return {}
    return {"memory_peak_gb": round(torch.cuda.max_memory_allocated() / GIB, 3)}


def out_of_memory_note(device: str, plan: Mapping[str, Any] | None, request: Mapping[str, Any]) -> str:
    """What a stage that ran out of GPU memory adds to its reason: its peak beside the plan,
    and what the user can change. The plan is a model of what the stages hold, which the H200
    showed short on some problems (benchmarks/RESULTS.md): an honest design must not read as
    one that wastes memory without the numbers to tell."""
    peak = peak_now(device).get("memory_peak_gb")
    if peak is None:
        return ""
    cap = request.get("gpu_memory_fraction")
    planned = f"; the evaluation's plan counted {plan['worker_needs_gb']:.2f} GiB" if plan else ""
    fix = (f"raise [pytorch] gpu_memory_fraction (now {cap:g}) if the design is honest" if cap
           else "free memory on the device (other processes hold some) if the design is honest")
    return f" (this stage held {peak:.2f} GiB at its peak{planned}: {fix})"
