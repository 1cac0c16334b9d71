"""Owns the GPU memory plan of an evaluation: what it needs, measured on one reference call,
against what this process and the device have, before any candidate call.

Worker-side only. What each stage holds is counted per stage (`stage_needs`: correctness,
integrity and timing, in inputs, outputs and workspaces, as measured on the H200), the
largest with slack; the judge, a process of its own, runs the reference beside it. The
per-process cap (`gpu_memory_fraction`) bounds each process; the device's free memory bounds both.

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
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

GIB = 2.0**30


SLACK_FRACTION = 0.05
SLACK_BYTES = 1 << 28
"""Added to the largest stage's holdings: the allocator's rounding, small tensors, comparison
chunks (5% and 256 MiB)."""


TIMED_CHECKS = 3
"""Timed calls whose outputs are checked afterwards, where three copies of their inputs fit."""


def timing_sets(want: int, in_b: int, room_b: int) -> int:
    """Input sets the timing stage rotates: `want`, fewer when they would take more than a
    quarter of the room (at least one)."""
    return max(1, min(want, int(0.25 * room_b // in_b))) if in_b > 0 else want


def kept_timed_calls(in_b: int, room_b: int) -> int:
    """Timed calls whose outputs are kept for checking: TIMED_CHECKS, or 1 when that many
    copies of the inputs (and their outputs) would take more than a tenth of the room."""
    return TIMED_CHECKS if in_b * TIMED_CHECKS * 2 < 0.1 * room_b else 1


def stage_needs(in_b: int, out_b: int, work_b: int, room_b: int, input_sets: int,
                anchor_b: int = 0) -> dict[str, int]:
    """What each stage of an evaluation holds at its peak beyond what the process held before
    (bytes), for one call's inputs `in_b`, output `out_b` and the reference's workspace
    `work_b`, with `room_b` available (the timing stage keeps fewer input sets and timed
    outputs when they would not fit: `timing_sets`, `kept_timed_calls`, the rules the stage
    itself uses). The candidate's own workspace is counted as the reference's.

    Measured on the H200 (benchmarks/RESULTS.md, "The memory plan against each stage's
    measured peak"): a correctness trial holds the generated inputs, the candidate's copy, both
    outputs, the judge's copy of the candidate's (until the judge answers) and, around the
    randomised and off-distribution trials, a second input set (4 inputs, 4 outputs, two
    workspaces), plus the float64 anchor's copies where it runs (`anchor_b`); integrity three
    inputs (the pristine copy, the candidate's, the poisoned block) and five outputs (two runs,
    their copies, the reference's); timing its input sets, the timed outputs kept for the judge
    with their inputs, the fresh inputs of the call it times and two outputs in flight."""
    sets, kept = timing_sets(input_sets, in_b, room_b), kept_timed_calls(in_b, room_b)
    return {
        "correctness": 4 * in_b + 4 * out_b + 2 * work_b + anchor_b,
        "integrity": 3 * in_b + 5 * out_b + 2 * work_b,
        "timing": sets * in_b + kept * (in_b + out_b) + in_b + 2 * out_b + 2 * work_b,
    }


def plan(w: StageContext) -> dict[str, Any]:
    """The plan of worker `w`'s evaluation (sizes in GiB): `stage_needs` at its largest, with
    slack, against the room this process and the device have.

    Raises:
        StageFailure: with the numbers, `problem_error` when the evaluation cannot fit on the
            device, `oom` when it could but other processes hold the memory (`shortfall`)."""
    p = w.loaded(need_candidate=False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    inputs = w.make_inputs(p, int(w.req["seeds"][0]))
    in_b = runtime.inputs_nbytes(inputs)
    anchored = w.anchor is not None and w.anchor_wanted(0, inputs)
    with torch.no_grad():
        out = w.call_reference(p.reference, inputs)
    out_b = runtime.output_nbytes(out)
    work_b = max(0, torch.cuda.max_memory_allocated() - base - in_b - out_b)
    _poison(out)  # no right answer left in the memory the candidate's first call may get
    del inputs, out
    runtime.free_memory()
    cap = w.req.get("gpu_memory_fraction")
    room = runtime.free_bytes(w.device, cap)  # the plan's call freed: what this process may add
    device_free = runtime.free_bytes(w.device)
    # float64 copies of the inputs, the output and the workspace, for the anchor's run
    anchor_b = int(_widening(p) * (in_b + out_b + work_b)) if anchored else 0
    stages = stage_needs(in_b, out_b, work_b, room, int(w.req["timing"]["input_sets"]), anchor_b)
    worker_b = int(max(stages.values()) * (1 + SLACK_FRACTION)) + SLACK_BYTES
    # the judge runs the reference on its own copy of the inputs for each record it checks
    judge_b = 2 * (in_b + out_b + work_b) if w.req.get("judge") else 0
    out_plan = {"inputs_gb": in_b / GIB, "output_gb": out_b / GIB, "reference_workspace_gb": work_b / GIB,
                "stages_gb": {k: round(v / GIB, 3) for k, v in stages.items()},
                "worker_needs_gb": worker_b / GIB, "judge_needs_gb": judge_b / GIB, "available_gb": room / GIB,
                "device_free_gb": device_free / GIB}
    total = torch.cuda.mem_get_info()[1]
    cap_b = int(cap * total) - torch.cuda.memory_allocated() if cap else total
    kind = shortfall(worker_b, judge_b, room, device_free, total, cap_b)
    if kind is not None:
        under = f" under gpu_memory_fraction = {cap:g}" if cap else ""
        top = max(stages, key=lambda k: stages[k])
        need = (f"an evaluation needs {worker_b / GIB:.1f} GiB in the worker (inputs {in_b / GIB:.2f} GiB, outputs "
                f"{out_b / GIB:.2f} GiB and the reference's workspace {work_b / GIB:.2f} GiB, held several times over "
                f"at the {top} stage's peak)" + (f" and {judge_b / GIB:.1f} GiB in the judge beside it" if judge_b else ""))
        if kind == "oom":
            raise StageFailure("oom", (
                f"the device's memory is taken: {need}; {device_free / GIB:.1f} GiB are free, "
                f"{(total - device_free) / GIB:.1f} GiB of its {total / GIB:.1f} GiB are in use (alone, it fits)"),
                {"memory": out_plan})
        raise StageFailure("problem_error", (
            f"the problem does not fit on this GPU: {need}; {room / GIB:.1f} GiB are available to the worker{under} "
            f"and {device_free / GIB:.1f} GiB free on the device: evaluate it on a GPU with more free memory, or "
            "make get_inputs() smaller"), {"memory": out_plan})
    return out_plan


ALONE_SHARE = 0.95
"""Of a device's memory, what an evaluation alone on it may plan to use: the rest is the
worker's and the judge's CUDA contexts and what the driver keeps."""


def shortfall(worker_b: int, judge_b: int, room_b: int, device_free_b: int, total_b: int, cap_b: int) -> str | None:
    """Why an evaluation needing `worker_b` in the worker and `judge_b` in the judge cannot run
    now (bytes): None when it fits; `problem_error` when it would not fit even alone on the
    device (`total_b`) or under the per-process cap (`cap_b`); `oom` when it would, but other
    processes hold the memory now (another evaluation, a baseline timed beside it: the worker
    runs again alone, `evaluation/submit.py`)."""
    if worker_b <= room_b and worker_b + judge_b <= device_free_b:
        return None
    if worker_b > cap_b or worker_b + judge_b > ALONE_SHARE * total_b:
        return "problem_error"
    return "oom"


def _widening(p: Any) -> float:
    """How much larger the float64 anchor's tensors are than the problem's (2 for float32, 4
    for half types): by the reference's first floating parameter, else 2."""
    for t in p.reference.parameters():
        if t.is_floating_point():
            return 8 / t.element_size()
    return 2.0


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
