"""Owns running one worker request on an executor and reading its results (`submitted`).

Workers share their device's memory (on a GPU, `workers_per_gpu` slots, the judge beside each,
and any other run on the machine): at KernelBench's sizes (6.4 GB an input) one worker can run
out of memory that others hold. A request whose results say it ran out of memory (failure kind
`oom`, the reference's calls included) runs again *alone* (`EvalRequest.alone`: every hold of
the device lock exclusive, so no other worker works on the device beside it), once; that run
stands, and the first one's seconds are kept for the budgets (`WorkerRun.earlier_s`). Where the
executor took the answer to an earlier request asking the same (`SandboxResult.answered`: a
resumed run's request found in a queue), that request is the one read and kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stratagem.core.graph import ValidatorSpec
from stratagem.evaluation.executors import Executor, Slot
from stratagem.evaluation.outcome import BatchOutcome, interpret
from stratagem.evaluation.sandbox import SandboxResult
from stratagem.worker_api.protocol import EvalRequest


@dataclass(frozen=True)
class WorkerRun:
    """One worker request as it ran: the request (alone or not), its slot, what the sandbox
    saw, its results, and the seconds of the runs before it whose results gave way."""

    request: EvalRequest
    slot: Slot
    result: SandboxResult
    out: BatchOutcome
    earlier_s: float = 0.0


async def submitted(executor: Executor, req: EvalRequest, specs: Sequence[ValidatorSpec], limit: float,
                    compile_limit: float | None, on_event: Callable[[dict[str, Any]], None] | None = None,
                    device: str | None = None, beside: Awaitable[Any] | None = None) -> WorkerRun:
    """Run `req`'s worker (on `device`, or where the executor puts it) under its limits and
    read its results; one that ran out of memory runs again alone, once `beside` (work of the
    caller's own that shares the device: the baselines timed beside a design) has ended."""
    slot, sr = await executor.submit(req, limit, compile_limit, on_event, device=device)
    if sr.answered is not None:  # an earlier request asking the same was answered: its results are these
        req = EvalRequest.model_validate(sr.answered)
    out = interpret(specs, sr, req.request_id, limit, compile_limit, req.compile_stage)
    if req.alone or not any(r.kind == "oom" for r in out.results):
        return WorkerRun(req, slot, sr, out)
    if on_event is not None:
        on_event({"event": "start", "stage": "again, alone on the device (it ran out of memory beside other work)"})
    if beside is not None:
        with contextlib.suppress(Exception):  # its own failure is its owner's to report
            await beside
    again = await submitted(executor, req.model_copy(update={"alone": True}), specs, limit, compile_limit, on_event,
                            device)
    return replace(again, earlier_s=sr.duration_s)
