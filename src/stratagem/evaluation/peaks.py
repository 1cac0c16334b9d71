"""Owns a device's calibrated peaks (bandwidth and matmul rates, for a domain whose parent
validators read them: `Domain.peaks`; PyTorch's roofline): measured once per machine and
physical device where a worker ran (the slot's host, never the parent's), kept on disk per host
and device, and the guard on a calibration that the reference, honest by definition, beats.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig, cache_dir
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains.base import Peaks, Task
from stratagem.errors import HarnessError
from stratagem.evaluation.executors import Executor

RunGraph = Callable[..., Awaitable[tuple[Verdict, dict[str, Any]]]]
"""`Evaluator.run_reference_graph`: (problem, specs, limit, device=) -> (verdict, environment)."""


class DevicePeaks:
    """The peaks an evaluator loaded or measured, per `host/device`, and their files."""

    def __init__(self, cfg: EvaluationConfig, executor: Executor, physical_device: str, run_graph: RunGraph) -> None:
        self.cfg, self.executor, self.physical_device, self.run_graph = cfg, executor, physical_device, run_graph
        self._known: dict[str, dict[str, Any]] = {}

    def path(self, device: str | None = None, host: str | None = None) -> Path:
        """Where the calibrated peaks of `device` (default: the first) on machine `host`
        (default: the executor's) are kept.

        Raises:
            HarnessError: no host given, and the executor's workers are elsewhere.
        """
        dev = device or self.physical_device
        where = host or self.executor.host()
        if where is None:
            raise HarnessError("the peaks of a remote worker's device are kept under its host: name the host")
        return cache_dir(self.cfg) / "peaks" / f"{where}-{dev.replace(':', '')}.json"

    def known(self, device: str, host: str | None) -> bool:
        """Whether the peaks of `device` on `host` are loaded or cached (no calibration waits)."""
        if host is None:
            return False
        return f"{host}/{device}" in self._known or self.path(device, host).exists()

    async def get(self, problem: Problem, peaks: Peaks, *, refresh: bool = False, device: str | None = None,
                  host: str | None = None) -> dict[str, Any] | None:
        """Calibrated bandwidth and matmul rates of `device` (default: the first) on machine
        `host` (default: the executor's), measured there (cached on disk per host and device;
        `refresh` measures again and replaces the file). Peaks a worker of another machine
        measured (a remote executor chose it) are kept for that machine and None is returned:
        one machine's peaks never stand in for another's."""
        dev = device or self.physical_device
        where = host or self.executor.host()
        if where is not None and not refresh and (cached := self._cached(where, dev, peaks.version)) is not None:
            return cached
        verdict, env = await self.run_graph(problem, peaks.calibrate_graph, 600.0, device=dev)
        r = verdict.result("calibrate")
        if r is None or r.outcome != "passed":
            return None
        measured_peaks = {**dict(r.details), "environment": env}
        measured = str(env.get("host") or where or ""), str(env.get("physical_device") or dev)
        if measured[0]:
            self.save(*measured, measured_peaks)
        if where is not None and measured != (where, dev):
            return None
        return measured_peaks

    def _cached(self, host: str, device: str, version: int) -> dict[str, Any] | None:
        """The loaded or cached peaks of `device` on `host`, of the domain's format."""
        if (known := self._known.get(f"{host}/{device}")) is not None:
            return known
        try:
            cached = json.loads(self.path(device, host).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None  # missing or unreadable: measured again
        if isinstance(cached, dict) and cached.get("version") == version:
            self._known[f"{host}/{device}"] = cached
            return cached
        return None  # of an older format: measured again

    def save(self, host: str, device: str, peaks: dict[str, Any]) -> None:
        self._known[f"{host}/{device}"] = peaks
        path = self.path(device, host)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(peaks, indent=1), encoding="utf-8")
        os.replace(tmp, path)

    async def checked(self, task: Task, peaks: Peaks, name: str, design: Design,
                      earlier: Mapping[str, ValidatorResult], device: str, host: str | None) -> ValidatorResult:
        """A parent validator that reads the device's peaks, with a guard on the calibration: the
        reference is honest by definition, so a floor it beats proves the peaks too low (a
        calibration on a loaded machine, say). They are measured again once; if the reference
        still beats the new floor, they are raised to what it was measured doing, else the
        check is skipped with a note rather than rejecting honest designs."""
        def run(with_peaks: Mapping[str, Any] | None) -> ValidatorResult:
            return task.run_parent_validator(name, design, earlier, with_peaks, device)

        problem = task.problem

        r = run(await self.get(problem, peaks, device=device, host=host))
        beaten = peaks.reference_beats_floor(earlier, r)
        if beaten is None:
            return r
        measured = await self.get(problem, peaks, refresh=True, device=device, host=host)
        r = run(measured)
        again = peaks.reference_beats_floor(earlier, r)
        if again is None:
            return ValidatorResult(r.name, r.outcome, r.reason, r.kind,
                                   {**r.details, "recalibrated": f"the earlier peaks were wrong: {beaten}"})
        raised = peaks.demonstrated(earlier, r, measured) if measured is not None else None
        if raised is not None:  # kept: later evaluations start from them and calibrate no more
            r = run(raised)
            where = host or self.executor.host()
            if peaks.reference_beats_floor(earlier, r) is None and where is not None:
                self.save(where, device, raised)
                return ValidatorResult(r.name, r.outcome, r.reason, r.kind, {
                    **r.details, "recalibrated": f"the calibrated peaks were too low ({again}): raised to what "
                    "the reference was measured doing"})
        return ValidatorResult(name, "passed", details={
            **r.details, "checked": False,
            "note": f"not checked: the device calibration is unreliable here ({again}); run `stratagem calibrate`"})
