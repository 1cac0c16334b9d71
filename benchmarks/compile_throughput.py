"""Benchmark (issue 28): how long a `load_inline` candidate's evaluation takes cold, again
unchanged, and after a one-line change, with the shared build cache
(`domains/pytorch/build/build_cache.py`, `worker/inline_builds.py`).

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

Columns: prebuild s and prebuilt (the CPU build worker that compiles a design before it takes
the GPU slot, `LocalExecutor.prebuild`: its wall and what it did, `built` or `hit`; the slot's
worker then finds the cache), build s (the load stage's `builds` records: seconds in
`load_inline` on the GPU slot, about 0 after a prebuild), whole
evaluation s (wall clock around `Evaluator.evaluate`), cache (hit, built, uncached), pch (the
row built torch's precompiled header for its flags, reused it, or had none: it lives in torch's
include folder and outlasts the run, so a second run of the benchmark finds it built).

`--header-diet off` builds the CUDA file as written (`STRATAGEM_BUILD_HEADER_DIET=0` for the
workers); on (the default) its `torch/extension.h` becomes `torch/types.h` (`header_diet.py`),
and the `diet` column says what the wrapper did (lightened, fell back, as written, skipped).

`--nvcc-only` needs no GPU and no evaluation: it times nvcc alone on the CUDA candidate's
`cuda.cu` as `load_inline` writes it, with torch's own flags (`COMMON_NVCC_FLAGS`, its include
paths, `-std=c++20`, `-O3`, one architecture, `-MD`), as written, lightened, and a lightened
source that fails to compile (what the fallback costs before it builds the source as written):
wall seconds and CPU seconds (user + system of nvcc and its children; on a loaded machine the
CPU seconds are the steadier figure).

Usage (from the repository root; needs torch and pydantic, not pydantic-ai):
    PYTHONPATH=src python benchmarks/compile_throughput.py --device cuda [--no-pch] [--skip-off] \
        [--header-diet on|off] [--json]
    PYTHONPATH=src python benchmarks/compile_throughput.py --nvcc-only [--arch 90] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import environment, load_config  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
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


def _config(device: str, cache: Path, build_cache: bool, split: bool = True, prebuild: str = "when_busy") -> Any:
    return load_config(None, {"pytorch": {"split_builds": split}, "evaluation": {"prebuild": prebuild,
        "device": device, "timeout_s": 300, "compile_timeout_s": 900, "baselines": ["eager"],
        "cache_dir": str(cache), "build_cache": build_cache,
        "timing": {"warmup_ms": 20, "budget_ms": 200, "min_reps": 5, "max_reps": 200},
    }}).evaluation


async def _evaluate(ev: Evaluator, source: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = await ev.evaluate(load_problem(PROBLEM), candidate_design(source), with_baseline=False)
    wall = time.perf_counter() - t0
    load = out.verdict.result("load")
    builds = list((load.details or {}).get("builds") or []) if load is not None else []
    return {"status": out.verdict.status, "whole_s": wall, "build_s": sum(float(b["build_s"]) for b in builds),
            "cache": ",".join(str(b["outcome"]) for b in builds) or "-", "builds": builds,
            "diet": ",".join(str(b.get("header_diet") or "-").split(":")[0] for b in builds) or "-",
            "load_s": load.duration_s if load is not None else None,
            # the CPU build worker's part (`LocalExecutor.prebuild`): its wall and what it built
            "prebuild_s": float((out.environment.get("prebuild") or {}).get("wall_s") or 0.0),
            "prebuild": ",".join(str(b.get("outcome")) for b in (out.environment.get("prebuild") or {}).get("builds") or [])
            or str((out.environment.get("prebuild") or {}).get("outcome") or "-"),
            "reason": None if out.verdict.status == "valid" else out.verdict.report()[-600:]}


def _executor(devices: list[str], cfg: Any, env: dict[str, str], diet: bool) -> LocalExecutor:
    """The local executor, its slots telling the workers whether to diet (the variable is set in
    the slots' own environment: the sandbox passes only allowlisted variables of the parent)."""
    ex = LocalExecutor.for_devices(devices, cfg, env)
    slots = [dataclasses.replace(s, env={**s.env, "STRATAGEM_BUILD_HEADER_DIET": "1" if diet else "0"})
             for s in ex.slots]
    return LocalExecutor(slots, cfg, env)


def run(device: str, pch: bool, skip_off: bool, diet: bool = True, split: bool = True,
        prebuild: str = "when_busy") -> list[dict[str, Any]]:
    template = CUDA_CANDIDATE if device == "cuda" else CPU_CANDIDATE
    first, changed = template.replace("BLOCK", "256"), template.replace("BLOCK", "512")
    env = dict(environment())
    env["STRATAGEM_BUILD_PCH"] = "1" if pch else "0"
    devices = ["cuda:0"] if device == "cuda" else ["cpu"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stratagem-compile-bench-") as tmp:
        if not skip_off:
            cfg = _config(device, Path(tmp) / "off", False, split, prebuild)
            ev = Evaluator(cfg, _executor(devices, cfg, env, diet), device)
            before = _pch_sign()
            row = asyncio.run(_evaluate(ev, first))
            rows.append({"row": "cold, cache off", "pch": _pch(before), **row})
        cfg = _config(device, Path(tmp) / "on", True, split, prebuild)
        ev = Evaluator(cfg, _executor(devices, cfg, env, diet), device)

        async def three() -> None:
            for label, src in (("cold", first), ("unchanged", first), ("one-line change", changed)):
                before = _pch_sign()
                row = await _evaluate(ev, src)
                rows.append({"row": label, "pch": _pch(before), **row})
                print(f"  {label}: prebuild {row.get('prebuild_s')} s ({row.get('prebuild')}), build {row.get('build_s')} s, whole {row.get('whole_s', 0):.1f} s, "
                      f"{row.get('cache')}, {row.get('status')}", flush=True)  # a cut run still says what it got

        asyncio.run(three())
    return rows


NEEDS_MORE = """
#include <torch/extension.h>
torch::Tensor gelu_cuda(torch::Tensor x) { using namespace torch; return nn::functional::gelu(x); }
"""
"""A source the diet's check lets through but that needs the frontend (nn without `torch::`):
the lightened compile fails, the cost of the fallback's first attempt."""


def _cuda_source() -> str:
    """The CUDA candidate's `cuda_src` (block 256)."""
    text = CUDA_CANDIDATE.replace("BLOCK", "256")
    return text.split('cuda_src = r"""', 1)[1].split('"""', 1)[0]


def nvcc_command(cu: Path, arch: str) -> list[str]:
    """nvcc as torch's ninja file runs it for `load_inline` (cpp_extension's flags, read from
    torch), with the benchmark candidate's `-O3` and one architecture."""
    import torch.utils.cpp_extension as ext

    try:
        inc = ext.include_paths("cuda")
    except OSError:  # a CPU build of torch finds no CUDA_HOME: nvcc's own
        inc = [*ext.include_paths("cpu"), str(Path(shutil.which("nvcc") or "nvcc").resolve().parent.parent / "include")]
    inc.append(sysconfig.get_path("include", scheme="posix_prefix"))
    flags = ["-DTORCH_EXTENSION_NAME=bench_relu_cuda", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for folder in inc:
        flags += ["-isystem", folder]
    flags += [*ext.COMMON_NVCC_FLAGS, "--compiler-options", "-fPIC", "-O3",
              f"-gencode=arch=compute_{arch},code=sm_{arch}", "-std=c++20"]
    return ["nvcc", "-MD", "-MF", f"{cu}.d", *flags, "-c", str(cu), "-o", f"{cu}.o"]


def _timed(cmd: list[str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "ok": out.returncode == 0, "error": out.stderr[-400:] if out.returncode else None}


def nvcc_only(arch: str, repeat: int) -> list[dict[str, Any]]:
    """nvcc alone over the candidate's `cuda.cu`: as written, lightened, lean, and a failing
    lightened and lean one."""
    import torch.utils.cpp_extension as ext

    from stratagem.domains.pytorch.build.header_diet import lean, lighten
    from stratagem.domains.pytorch.build.kernel_split import split

    prefix = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"  # load_inline's
    written = _cuda_source()
    light = lighten([written]).sources
    failing = lighten([NEEDS_MORE]).sources
    ops = next((Path(p) / "ATen" / "ops" for p in ext.include_paths() if (Path(p) / "ATen" / "ops").is_dir()), None)

    def leaned(text: str) -> str:
        got = lean([text], [], lambda n: ops is not None and (ops / f"{n}.h").is_file()).cuda_sources
        assert got is not None
        return "\n".join(got)

    assert light is not None and failing is not None
    cut = split([written], ["torch::Tensor relu_cuda(torch::Tensor x);"], ["-O3"], [])
    assert cut.cuda_sources is not None and cut.cpp_sources is not None, cut.skipped
    cases = [("as written", prefix + written), ("lightened", prefix + light[0]), ("lean", leaned(written)),
             ("split: kernels", cut.cuda_sources[0]),
             ("lightened, fails", prefix + failing[0]), ("lean, fails", leaned(NEEDS_MORE))]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stratagem-nvcc-bench-") as tmp:
        for _ in range(repeat):
            for label, text in cases:
                cu = Path(tmp) / "cuda.cu"
                cu.write_text(text)
                rows.append({"row": label, **_timed(nvcc_command(cu, arch))})
            host = Path(tmp) / "main.cpp"  # the split's host unit, as torch's ninja file compiles main.cpp
            host.write_text("\n".join(cut.cpp_sources))
            rows.append({"row": "split: host (g++)", **_timed(gcc_command(host))})
    return rows


def gcc_command(cpp: Path) -> list[str]:
    """g++ as torch's ninja file runs it for `main.cpp` (its include paths, `-fPIC -std=c++20`),
    reading torch's precompiled header where one fits."""
    import torch.utils.cpp_extension as ext

    try:
        inc = ext.include_paths("cuda")
    except OSError:  # a CPU build of torch: the CUDA toolkit's headers where nvcc has them
        near = Path(shutil.which("nvcc") or "nvcc").resolve().parent.parent / "include"
        inc = [*ext.include_paths("cpu"), str(near if (near / "cuda_runtime.h").exists() else "/usr/local/cuda/include")]
    inc.append(sysconfig.get_path("include", scheme="posix_prefix"))
    flags = ["-DTORCH_EXTENSION_NAME=bench_relu_cuda", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for folder in inc:
        flags += ["-isystem", folder]
    return ["c++", "-MMD", "-MF", f"{cpp}.d", *flags, "-fPIC", "-std=c++20", "-c", str(cpp), "-o", f"{cpp}.o"]


def _main_nvcc(args: argparse.Namespace) -> int:
    if shutil.which("nvcc") is None:
        print("no nvcc on PATH")
        return 2
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False).stdout
    print(f"nvcc alone on the CUDA candidate's cuda.cu, sm_{args.arch}, {os.cpu_count()} cores; "
          f"{version.strip().splitlines()[-1] if version.strip() else 'nvcc ?'}")
    print(" ".join(nvcc_command(Path("cuda.cu"), args.arch)))
    rows = nvcc_only(args.arch, args.repeat)
    print(f"{'row':<18} {'wall s':>8} {'cpu s':>8} {'compiled':>9}")
    for r in rows:
        print(f"{r['row']:<18} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {'yes' if r['ok'] else 'no':>9}")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] == (not r["row"].endswith("fails")) for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--no-pch", action="store_true",
                    help="build without precompiled headers (deletes torch's, which gcc would use anyway)")
    ap.add_argument("--skip-off", action="store_true", help="skip the cache-off row")
    ap.add_argument("--header-diet", choices=("on", "off"), default="on",
                    help="the CUDA file's torch/extension.h as torch/types.h (on, the default) or as written")
    ap.add_argument("--split", choices=("on", "off"), default="on",
                    help="the split build first (kernels without torch's headers, `[pytorch] split_builds`)")
    ap.add_argument("--prebuild", choices=("when_busy", "always", "never"), default="when_busy",
                    help="[evaluation] prebuild: when_busy (the default; one design at a time here, so its slot "
                         "is free and it builds there), always (on a CPU build worker first), never")
    ap.add_argument("--nvcc-only", action="store_true", help="time nvcc alone on the CUDA file (no GPU needed)")
    ap.add_argument("--arch", default="90", help="with --nvcc-only: the architecture (90: H100/H200)")
    ap.add_argument("--repeat", type=int, default=1, help="with --nvcc-only: rounds of the three compiles")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args(argv)
    if args.nvcc_only:
        return _main_nvcc(args)
    what = ("a CUDA load_inline ReLU (torch/extension.h in the .cu)" if args.device == "cuda" else
            "a C++-only load_inline ReLU (no GPU here: the C++ build and the evaluation around it)")
    print(f"compile throughput: {what}, device {args.device}, precompiled headers "
          f"{'off' if args.no_pch else 'on where torch supports them'}, header diet {args.header_diet}, "
          f"split {args.split}, prebuild {args.prebuild}")
    if args.no_pch:  # gcc uses a fitting header wherever it lies, asked for or not
        import torch.utils.cpp_extension as ext

        ext.remove_extension_h_precompiler_headers()
    rows = run(args.device, not args.no_pch, args.skip_off, args.header_diet == "on", args.split == "on",
               args.prebuild)
    print(f"{'row':<18} {'prebuild s':>10} {'prebuilt':>9} {'build s':>8} {'whole evaluation s':>19} {'cache':>9} {'pch':>7} {'diet':>10} {'status':>8}")
    for r in rows:
        print(f"{r['row']:<18} {r['prebuild_s']:>10.1f} {r['prebuild']:>9} {r['build_s']:>8.1f} {r['whole_s']:>19.1f} {r['cache']:>9} {r['pch']:>7} "
              f"{r['diet']:>10} {r['status']:>8}")
    for r in rows:
        if r["reason"]:
            print(f"\n{r['row']}: {r['reason']}")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["status"] == "valid" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
