"""The writers' `profile` tool on a device, as the agents get it (issue 58): for each problem, the
reference, its torch.compile recipe and any designs given, profiled in the harness's sandbox
(the `profile` graph: static checks, load, one warm call under torch's profiler, then each
kernel set beside the device's calibrated peaks), and the text the Strategist and the Analyst
would read, with the problem's roofline floor from one evaluation of the reference (its timing
and roofline stages). Writes the texts and the stage details as JSON with --out.

    python benchmarks/profile_gpu.py --kernelbench .kb --problems level1/23_Softmax,level2/76_Gemm_Add_ReLU
    python benchmarks/profile_gpu.py --problem examples/03_softmax/problem.py --design DESIGN.py --device cpu

Whether Nsight Compute (`ncu`) is on PATH is printed: the tool's rows come from torch's profiler
either way (their `source`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.core.design import Design, text_files  # noqa: E402
from stratagem.core.jsonish import mapping  # noqa: E402
from stratagem.domains import get_domain  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.domains.pytorch.recipes.catalog import BY_NAME, render  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402
from stratagem.search import probes  # noqa: E402


def problems_of(args: argparse.Namespace) -> list[Path]:
    paths = [Path(p) for p in args.problem]
    for name in [n for n in args.problems.split(",") if n]:
        path = Path(args.kernelbench) / (name if name.endswith(".py") else f"{name}.py")
        if not path.exists():
            sys.exit(f"--problems {name}: no {path} (--kernelbench {args.kernelbench})")
        paths.append(path)
    if not paths:
        sys.exit("give --problems (with --kernelbench) or --problem")
    return paths


async def one(evaluator: Any, path: Path, designs: list[Path], compiled: bool) -> dict[str, Any]:
    problem = load_problem(path)
    main = get_domain(problem.domain).main_file(problem)
    graph = probes.graph_of(problem, "profile")
    assert graph is not None
    t0 = time.monotonic()
    ref = await evaluator.evaluate(problem, probes.target(problem, "reference", [])[0], with_baseline=False)
    roof = ref.verdict.result("roofline")
    rd = (roof.details or {}) if roof is not None else {}
    floor_ms, basis = (rd.get("floor_ms"), rd.get("basis")) if rd.get("checked") else (None, None)
    targets: list[tuple[str, Design]] = [("the reference", probes.target(problem, "reference", [])[0])]
    if compiled:
        targets.append(("torch.compile of the reference",
                        Design(files=text_files(render(problem.source, [BY_NAME["compile"]]), main))))
    targets += [(f"design {d.name}", Design(files=text_files(d.read_text(), main))) for d in designs]
    out: dict[str, Any] = {"problem": str(path), "floor_ms": floor_ms, "reference_status": ref.verdict.status,
                           "profiles": []}
    for of, design in targets:
        s0 = time.monotonic()
        ev = await evaluator.evaluate(problem, design, with_baseline=False, graph=graph)
        text = probes.probe_text("profile", ev.verdict, of, floor_ms, basis)
        k = ev.verdict.result("kernels")
        print(f"\n=== {path.parent.name if path.stem == 'problem' else path.stem}: {of} ({time.monotonic() - s0:.1f} s, {len(text.splitlines())} lines, "
              f"{len(text)} chars)\n{text}", flush=True)
        out["profiles"].append({"of": of, "status": ev.verdict.status, "text": text, "wall_s": time.monotonic() - s0,
                                "kernels": mapping(k.details) if k is not None else None,
                                "environment": {n: ev.environment.get(n) for n in ("host", "physical_device", "device_name")}})
    out["wall_s"] = time.monotonic() - t0
    return out


async def main_async(args: argparse.Namespace) -> int:
    ncu = shutil.which("ncu")
    print(f"{time.strftime('%Y-%m-%d %H:%M')} · device {args.device} · Nsight Compute: "
          f"{ncu or 'not installed'} (the rows come from torch.profiler)", flush=True)
    cfg = load_config(None, {"evaluation": {"device": args.device, "baselines": ["eager"]}})
    evaluator = make_evaluator(cfg.evaluation)
    results = []
    try:
        for path in problems_of(args):
            results.append(await one(evaluator, path, [Path(d) for d in args.design], not args.no_compile))
    finally:
        await evaluator.executor.aclose()
    if args.out:
        Path(args.out).write_text(json.dumps({"ncu": ncu, "device": args.device, "results": results}, indent=1,
                                             default=str))
    bad = [p["of"] for r in results for p in r["profiles"] if p["status"] != "valid"]
    if bad:
        print(f"\nnot profiled: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kernelbench", default=".kb", help="KernelBench's level folders (default .kb)")
    ap.add_argument("--problems", default="", help="comma-separated, e.g. level1/23_Softmax,level2/76_Gemm_Add_ReLU")
    ap.add_argument("--problem", action="append", default=[], help="a problem file (repeatable)")
    ap.add_argument("--design", action="append", default=[], help="a design file profiled beside the reference")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile recipe")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="", help="write the texts and details as JSON here")
    sys.exit(asyncio.run(main_async(ap.parse_args())))


if __name__ == "__main__":
    main()
