"""The toy domain's worker module (`toy.ToyDomain.worker_module`), for the worker entry point
(`python -m stratagem.evaluation.worker`): one stage, `check`, that runs the reference's and
the design's `f(N)` in the worker process and compares them. Standard library only, like any
worker module; the response's environment says which module ran and whether pydantic was
loaded in the worker process (it must not be)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def _f(source: str) -> Callable[[int], int]:
    scope: dict[str, Any] = {}
    exec(compile(source, "<toy>", "exec"), scope)  # noqa: S102 - the toy's candidate, a test fixture
    return scope["f"]


def check(request: Mapping[str, Any]) -> dict[str, Any]:
    reference = request["problem"]["source"]
    scope: dict[str, Any] = {}
    exec(compile(reference, "<reference>", "exec"), scope)  # noqa: S102
    n = int(scope["N"])
    want, got = _f(reference)(n), _f(request["files"]["candidate.py"])(n)
    if want != got:
        return {"outcome": "failed", "reason": f"f({n}) = {got}, expected {want}", "kind": "wrong_output",
                "details": {"value": got}}
    return {"outcome": "passed", "reason": None, "kind": None, "details": {"value": got}}


def run_request(request: Mapping[str, Any], workdir: Path, emit: Callable[[str, dict[str, Any]], None],
                record_dir: Path | None = None) -> dict[str, Any]:
    results = []
    for stage in request["stages"]:
        emit("start", {"stage": stage["name"]})
        t0 = time.perf_counter()
        result = {"name": stage["name"], **check(request), "duration_s": time.perf_counter() - t0}
        emit("end", {"stage": stage["name"], "result": result})
        results.append(result)
    return {"results": results,
            "environment": {"worker_module": __name__, "pydantic_loaded": "pydantic" in sys.modules}}
