"""Owns what every domain's worker module shares around its stages: the stage driver
(`plan`, `drive`: the requested stages in the graph's order, the dependents of a failed stage
skipped, a `start` and an `end` event a stage, the rest skipped once the worker is retired),
`StageFailure` (a stage's end as a failed result), the progress emitter's type (`Emit`), the
worker kept off the cores reserved for timing, and the CPU's name for the environment a
worker describes.

Standard library only (with `core/`): it runs in the sandboxed worker, which may have
neither pydantic nor a domain's libraries.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, cast

from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.verdict import FailureKind, ValidatorResult

Emit = Callable[[str, dict[str, Any]], None]
"""A worker's progress: `emit(event, data)` (`start`, `end`, `phase`, ...)."""


class StageFailure(Exception):
    """Raised inside a worker stage to end it as failed, with a kind (`FailureKind`), a reason
    and details (a mapping, and keyword details added to it)."""

    def __init__(self, kind: str, reason: str, details: Mapping[str, Any] | None = None, **more: Any) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason
        self.details: dict[str, Any] = {**(details or {}), **more}

    def result(self, name: str, duration_s: float, **more: Any) -> ValidatorResult:
        """The failed result of stage `name`, with `more` added to the details."""
        return ValidatorResult(name, "failed", self.reason, cast(FailureKind, self.kind), {**self.details, **more},
                               duration_s)


def plan(request: Mapping[str, Any], known: Collection[str], what: str = "worker stages") -> ValidatorGraph:
    """The graph of the request's stages.

    Raises:
        ValueError: a stage this worker does not know (`what` names the worker's stages).
    """
    specs = [ValidatorSpec(s["name"], tuple(s.get("requires", ())), "worker") for s in request["stages"]]
    unknown = [s.name for s in specs if s.name not in known]
    if unknown:
        raise ValueError(f"unknown {what}: {unknown}")
    return ValidatorGraph.of(specs)


def drive(graph: ValidatorGraph, run_stage: Callable[[str], ValidatorResult], emit: Emit,
          retired: Callable[[], str | None] = lambda: None) -> list[dict[str, Any]]:
    """Run the graph's stages in order, each by `run_stage` between a `start` and an `end`
    event (a stage whose prerequisites did not all pass is skipped by the graph's rules, with
    no event). Once `retired()` gives a reason (a worker that can no longer be trusted), every
    later stage is skipped with it: an `end` event, no `start`. Returns the results as JSON."""
    run = GraphRun(graph, batch_placement=None)
    while (step := run.next_step()) is not None:
        name = step.specs[0].name
        why = retired()
        if why is not None:
            result = ValidatorResult(name, "skipped", reason=why)
        else:
            emit("start", {"stage": name})
            result = run_stage(name)
        run.record([result])
        emit("end", {"stage": name, "result": result.to_json()})
    return [r.to_json() for r in run.results]


def keep_off_reserved_cores(request: Mapping[str, Any]) -> None:
    """On a GPU machine with cores reserved for timing (`reserved_cores`), this worker (and
    every process it starts: builds, commands) runs off them, except while it times (Linux only)."""
    reserved = {int(c) for c in request.get("reserved_cores") or ()}
    if not reserved or not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError):
        rest = os.sched_getaffinity(0) - reserved
        if rest:
            os.sched_setaffinity(0, rest)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` says of the machine."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
