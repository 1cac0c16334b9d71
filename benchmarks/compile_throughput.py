"""Benchmark (issue 28): how long a `load_inline` candidate's evaluation takes cold, again
unchanged, and after a one-line change, with the shared build cache
(`domains/pytorch/build_cache.py`, `worker/inline_builds.py`).

On `--device cuda`: a KernelBench-style CUDA ReLU (`#include <torch/extension.h>` in the .cu,
as generated candidates write it) over `tests/fixtures/problem_relu.py`. On `--device cpu`
(no GPU: a CPU-only torch cannot link CUDA code, though nvcc may exist), a C++-only ReLU over
the same problem: what is measured is then the C++ build and the evaluation around it. Every
evaluation runs through the real harness (sandboxed worker, correctness, timing; no
baselines). Rows:

- `cold, cache off`: the build cache off (`build_cache = false`), fresh extension folders (the
  other build changes stay: one architecture, the precompiled header unless `--no-pch`); with
  `--no-pch` this is what every evaluation of a new slot paid before (skip it: `--skip-off`);
- `cold`: a fresh cache (precompiled header as found: the table says whether it existed);
- `unchanged`: the same source again (a cache hit: no build);
- `one-line change`: the block size (CUDA) or a constant (C++) changed: a miss, built again.

Columns: build s (the load stage's `builds` records: seconds in `load_inline`), whole
evaluation s (wall clock around `Evaluator.evaluate`), cache (hit, built, uncached), pch (the
row built torch's precompiled header for its flags, reused it, or had none: it lives in torch's
include folder and outlasts the run, so a second run of the benchmark finds it built).

Usage (from the repository root; needs torch and pydantic, not pydantic-ai):
    PYTHONPATH=src python benchmarks/compile_throughput.py --device cuda [--no-pch] [--skip-off] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import environment, load_config  # noqa: E402
from stratagem.core.design import Design  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.executors import LocalExecutor  # noqa: E402
from stratagem.evaluation.service import Evaluator  # noqa: E402

PROBLEM = ROOT / "tests/fixtures/problem_relu.py"
CUDA_CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    const int block = BLOCK;
    relu_kernel<<<(n + block - 1) / block, block>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu_cuda(torch::Tensor x);"
relu = load_inline(name="bench_relu_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["relu_cuda"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu_cuda(x.contiguous())
'''
CPU_CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
torch::Tensor relu_cpu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float floor = BLOCK * 0.0f;
    for (int64_t i = 0; i < xc.numel(); ++i) out[i] = in[i] > floor ? in[i] : floor;
    return y;
}
"""
relu = load_inline(name="bench_relu_cpu", cpp_sources=cpp_src, functions=["relu_cpu"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu_cpu(x)
'''


def _pch_sign() -> str | None:
    """torch's record of the flags its one precompiled header was built with (None: none)."""
    import torch

    folder = Path(torch.__file__).parent / "include" / "torch"
    try:
        return (folder / "extension.h.sign").read_text() if (folder / "extension.h.gch").exists() else None
    except OSError:
        return None


def _pch(before: str | None) -> str:
    """What the row did with the precompiled header: built it (for its flags), reused it, none."""
    after = _pch_sign()
    return "none" if after is None else ("reused" if after == before else "built")


def _config(device: str, cache: Path, build_cache: bool) -> Any:
    return load_config(None, {"evaluation": {
        "device": device, "timeout_s": 300, "compile_timeout_s": 900, "baselines": ["eager"],
        "cache_dir": str(cache), "build_cache": build_cache,
        "timing": {"warmup_ms": 20, "budget_ms": 200, "min_reps": 5, "max_reps": 200},
    }}).evaluation


async def _evaluate(ev: Evaluator, source: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = await ev.evaluate(load_problem(PROBLEM), Design.from_source(source), with_baseline=False)
    wall = time.perf_counter() - t0
    load = out.verdict.result("load")
    builds = list((load.details or {}).get("builds") or []) if load is not None else []
    return {"status": out.verdict.status, "whole_s": wall, "build_s": sum(float(b["build_s"]) for b in builds),
            "cache": ",".join(str(b["outcome"]) for b in builds) or "-", "builds": builds,
            "load_s": load.duration_s if load is not None else None,
            "reason": None if out.verdict.status == "valid" else out.verdict.report()[-600:]}


def run(device: str, pch: bool, skip_off: bool) -> list[dict[str, Any]]:
    template = CUDA_CANDIDATE if device == "cuda" else CPU_CANDIDATE
    first, changed = template.replace("BLOCK", "256"), template.replace("BLOCK", "512")
    env = dict(environment())
    env["STRATAGEM_BUILD_PCH"] = "1" if pch else "0"
    devices = ["cuda:0"] if device == "cuda" else ["cpu"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stratagem-compile-bench-") as tmp:
        if not skip_off:
            cfg = _config(device, Path(tmp) / "off", False)
            ev = Evaluator(cfg, LocalExecutor.for_devices(devices, cfg, env), device)
            before = _pch_sign()
            row = asyncio.run(_evaluate(ev, first))
            rows.append({"row": "cold, cache off", "pch": _pch(before), **row})
        cfg = _config(device, Path(tmp) / "on", True)
        ev = Evaluator(cfg, LocalExecutor.for_devices(devices, cfg, env), device)

        async def three() -> None:
            for label, src in (("cold", first), ("unchanged", first), ("one-line change", changed)):
                before = _pch_sign()
                row = await _evaluate(ev, src)
                rows.append({"row": label, "pch": _pch(before), **row})

        asyncio.run(three())
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--no-pch", action="store_true",
                    help="build without precompiled headers (deletes torch's, which gcc would use anyway)")
    ap.add_argument("--skip-off", action="store_true", help="skip the cache-off row")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args(argv)
    what = ("a CUDA load_inline ReLU (torch/extension.h in the .cu)" if args.device == "cuda" else
            "a C++-only load_inline ReLU (no GPU here: the C++ build and the evaluation around it)")
    print(f"compile throughput: {what}, device {args.device}, precompiled headers "
          f"{'off' if args.no_pch else 'on where torch supports them'}")
    if args.no_pch:  # gcc uses a fitting header wherever it lies, asked for or not
        import torch.utils.cpp_extension as ext

        ext.remove_extension_h_precompiler_headers()
    rows = run(args.device, not args.no_pch, args.skip_off)
    print(f"{'row':<18} {'build s':>8} {'whole evaluation s':>19} {'cache':>9} {'pch':>7} {'status':>8}")
    for r in rows:
        print(f"{r['row']:<18} {r['build_s']:>8.1f} {r['whole_s']:>19.1f} {r['cache']:>9} {r['pch']:>7} "
              f"{r['status']:>8}")
    for r in rows:
        if r["reason"]:
            print(f"\n{r['row']}: {r['reason']}")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["status"] == "valid" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
