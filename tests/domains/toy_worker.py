"""The toy domain's worker module (`toy.ToyDomain.worker`), which the worker entry point
(`python -m stratagem.evaluation.worker`) imports in the sandbox: `check` runs the reference's
and the design's `f(N)` and compares them, `timing` calls the two alternately in blocks (the
paired ratio). Standard library and `stratagem.core` only, like any worker module; the
response's environment says which module ran, whether pydantic was loaded (it must not be), and
the toy's variables the sandbox passed (`TOY_*`, its per-slot cache)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stratagem.core.paired import Stability, paired_ratio


def _f(source: str) -> Callable[[int], int]:
    scope: dict[str, Any] = {}
    exec(compile(source, "<toy>", "exec"), scope)  # noqa: S102 - the toy's candidate, a test fixture
    return scope["f"]


def _stats(samples: list[float]) -> dict[str, Any]:
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "iqr_ms": q3 - q1, "n": len(samples)}


def check(request: Mapping[str, Any], n: int) -> dict[str, Any]:
    want, got = _f(request["problem"]["source"])(n), _f(request["files"]["candidate.py"])(n)
    if want != got:
        return {"outcome": "failed", "reason": f"f({n}) = {got}, expected {want}", "kind": "wrong_output",
                "details": {"value": got}}
    return {"outcome": "passed", "reason": None, "kind": None, "details": {"value": got}}


def timing(request: Mapping[str, Any], n: int, blocks: int = 12, calls: int = 5) -> dict[str, Any]:
    fs = {"reference": _f(request["problem"]["source"]), "candidate": _f(request["files"]["candidate.py"])}
    out: dict[str, list[list[float]]] = {"reference": [], "candidate": []}
    for b in range(blocks):
        for who in ("reference", "candidate") if b % 2 == 0 else ("candidate", "reference"):
            block = []
            for _ in range(calls):
                t = time.perf_counter()
                fs[who](n)
                block.append((time.perf_counter() - t) * 1e3)
            out[who].append(block)
    flat = {k: [x for blk in v for x in blk] for k, v in out.items()}
    return {"outcome": "passed", "reason": None, "kind": None, "details": {
        "runtime": _stats(flat["candidate"]), "reference": _stats(flat["reference"]),
        "speedup": paired_ratio(out["reference"], out["candidate"]).to_json(),
        "stability": Stability(True).to_json(), "attempts": [{}], "pairs": blocks}}


def run_request(request: Mapping[str, Any], workdir: Path, emit: Callable[[str, dict[str, Any]], None],
                record_dir: Path | None = None) -> dict[str, Any]:
    for name, text in request["files"].items():  # a design's other files, importable beside it
        (workdir / name).write_text(text, encoding="utf-8")
    sys.path.insert(0, str(workdir))
    scope: dict[str, Any] = {}
    exec(compile(request["problem"]["source"], "<reference>", "exec"), scope)  # noqa: S102
    n, results = int(scope["N"]), []
    for stage in request["stages"]:
        emit("start", {"stage": stage["name"]})
        t0 = time.perf_counter()
        run = check if stage["name"] == "check" else timing
        result = {"name": stage["name"], **run(request, n), "duration_s": time.perf_counter() - t0}
        emit("end", {"stage": stage["name"], "result": result})
        results.append(result)
        if result["outcome"] != "passed":
            break
    return {"results": results,
            "environment": {"worker_module": __name__, "pydantic_loaded": "pydantic" in sys.modules,
                            **{k: v for k, v in os.environ.items() if k.startswith("TOY_")}}}
