"""Benchmark of the evaluation harness itself (issue 2), run on a GPU machine.

Prints one table per measurement:
  1. per example: eager / compile / max-autotune / candidate median and speedup;
  2. stability: the spread of 5 repeated evaluations of the same candidate (fresh workers);
  3. agreement of the harness's median with triton.testing.do_bench (median), and the
     harness in `stream` sync mode (do_bench's own protocol);
  4. harness overhead per evaluation: wall time minus compile and timed work;
  5. the wall time of one whole evaluation of KernelBench level1/19_ReLU.py (5 correctness
     trials + timing), if --kernelbench points at a KernelBench checkout (or a folder holding
     level1/19_ReLU.py).

Usage: python benchmarks/harness.py [--examples examples] [--kernelbench DIR] [--repeats 5]
       [--out results.json] [--only 01_elementwise,...] [--max-reps N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator, read_design  # noqa: E402


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    out = [f"\n### {title}\n", line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def do_bench_median(problem_path: Path, candidate_path: Path) -> float | None:
    """Median of triton.testing.do_bench for the candidate, in this process."""
    import importlib.util

    import torch
    import triton.testing

    def load(path: Path, name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    prob = load(problem_path, f"bench_ref_{problem_path.parent.name}")
    cand = load(candidate_path, f"bench_cand_{problem_path.parent.name}_{candidate_path.stem}")
    torch.manual_seed(0)
    with torch.device("cuda"):
        init = prob.get_init_inputs()
        torch.manual_seed(0)
        model = cand.ModelNew(*init).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
    def call() -> Any:
        return model(*inputs)

    with torch.no_grad():
        ms = triton.testing.do_bench(call, warmup=100, rep=500, return_mode="median")
    torch.cuda.empty_cache()
    return float(ms)


async def evaluate(evaluator: Any, problem: Any, design: Any, with_baseline: bool = True) -> Any:
    return await evaluator.evaluate(problem, design, with_baseline=with_baseline, timeout_s=600)


def overhead_row(name: str, ev: Any) -> list[Any]:
    """Wall time of one evaluation (no baseline) split into compile, timed work and the rest."""
    load = ev.verdict.result("load")
    compile_s = float(load.details.get("import_s", 0.0)) if load else 0.0
    timing = ev.timing or {}
    timed_s = sum(timing.get("samples_ms", [])) / 1e3
    stages_s = sum(r.duration_s or 0.0 for r in ev.verdict.results)
    worker_s = float(ev.sandbox.get("duration_s", 0.0))
    startup_s = worker_s - stages_s  # process start, torch import, CUDA context, teardown
    return [name, fmt(ev.wall_s, ".2f"), fmt(compile_s, ".2f"), fmt(timed_s, ".2f"),
            fmt(ev.wall_s - compile_s - timed_s, ".2f"), fmt(startup_s, ".2f")]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    # One worker slot: one compile cache, and evaluations never wait for each other.
    timing = {"max_reps": args.max_reps} if args.max_reps else {}
    base = {"device": args.device, "workers_per_gpu": 1, "timing": timing}
    cfg = load_config(None, {"evaluation": base}).evaluation
    device_cfg = load_config(None, {"evaluation": {**base, "timing": {**timing, "sync_mode": "device"}}}).evaluation
    evaluator, device_eval = make_evaluator(cfg), make_evaluator(device_cfg)
    results: dict[str, Any] = {"examples": [], "stability": [], "agreement": [], "overhead": []}
    dirs = sorted(p for p in Path(args.examples).iterdir() if (p / "problem.py").exists())
    if args.only:
        dirs = [d for d in dirs if d.name in args.only.split(",")]
    rows, stab, agree, over = [], [], [], []
    for d in dirs:
        problem = load_problem(d / "problem.py")
        for cand_path in sorted((d / "candidates").glob("*.py")):
            name = f"{d.name}/{cand_path.stem}"
            design = read_design(cand_path, problem)
            t0 = time.monotonic()
            ev = await evaluate(evaluator, problem, design)
            print(f"[{time.monotonic() - t0:6.1f}s] {name}: {ev.verdict.status} "
                  f"{ev.runtime_ms} ms speedup {ev.speedup}", flush=True)
            if ev.verdict.status != "valid":
                print("   ", ev.verdict.report(), flush=True)
            ref = ev.reference_ms
            rows.append([name, ev.verdict.status, fmt(ref.get("eager")), fmt(ref.get("compile")),
                         fmt(ref.get("max-autotune")), fmt(ev.runtime_ms), fmt(ev.speedup, ".2f")])
            results["examples"].append(ev.summary())
            _checkpoint(args, results)
            if ev.verdict.status != "valid":
                continue
            reps = [await evaluate(evaluator, problem, design, False) for _ in range(args.repeats)]
            over.append(overhead_row(name, reps[-1]))
            meds = [r.runtime_ms for r in reps if r.runtime_ms is not None]
            spread = (max(meds) - min(meds)) / statistics.median(meds) * 100 if meds else None
            stab.append([name, fmt(statistics.median(meds)), fmt(min(meds)), fmt(max(meds)), fmt(spread, ".2f")])
            results["stability"].append({"name": name, "medians_ms": meds, "spread_pct": spread})
            dev_ev = await evaluate(device_eval, problem, design, False)
            db = do_bench_median(d / "problem.py", cand_path) if args.device != "cpu" else None
            ours = statistics.median(meds)
            dev = (ours / db - 1) * 100 if db else None
            ddev = (dev_ev.runtime_ms / db - 1) * 100 if db and dev_ev.runtime_ms else None
            agree.append([name, fmt(ours), fmt(dev_ev.runtime_ms), fmt(db), fmt(dev, "+.1f"), fmt(ddev, "+.1f")])
            results["agreement"].append({"name": name, "stream_ms": ours,
                                         "device_sync_ms": dev_ev.runtime_ms, "do_bench_ms": db})
            print(f"    stability {fmt(spread, '.2f')}% · do_bench {fmt(db)} ms ({fmt(dev, '+.1f')}%) · "
                  f"overhead {overhead_row(name, reps[-1])[4]} s", flush=True)
            _checkpoint(args, results)
    report = [
        table("Examples (ms, median)", ["candidate", "status", "eager", "compile", "max-autotune", "candidate", "speedup"], rows),
        table(f"Stability: {args.repeats} evaluations, fresh workers (ms)", ["candidate", "median", "min", "max", "spread %"], stab),
        table("Agreement with triton.testing.do_bench (median, ms)",
              ["candidate", "harness (stream, default)", "harness (device sync)", "do_bench", "dev %", "device-sync dev %"], agree),
        table("Overhead per evaluation, baseline cached (s)",
              ["candidate", "wall", "compile/import", "timed work", "overhead", "of which worker startup"], over),
    ]
    if args.kernelbench:
        kb = Path(args.kernelbench)
        relu = next((p for p in [kb / "KernelBench/level1/19_ReLU.py", kb / "level1/19_ReLU.py", kb / "19_ReLU.py"] if p.exists()), None)
        if relu is None:
            print(f"no 19_ReLU.py under {kb}", flush=True)
        else:
            problem = load_problem(relu)
            design = read_design(ROOT / "benchmarks/candidates/relu_triton.py", problem)
            walls = []
            for i in range(2):  # first run compiles the Triton kernel; the second hits the cache
                t0 = time.monotonic()
                ev = await evaluate(evaluator, problem, design, with_baseline=False)
                walls.append(time.monotonic() - t0)
                print(f"19_ReLU run {i}: {ev.verdict.status} wall {walls[-1]:.1f}s runtime {ev.runtime_ms}", flush=True)
                if ev.verdict.status != "valid":
                    print("   ", ev.verdict.report(), flush=True)
            stages = {r.name: r.duration_s for r in ev.verdict.results}
            base = await evaluator.baseline(problem, environment=ev.environment, timeout_s=600)
            rrows = [[f"run {i}", fmt(w, ".1f")] for i, w in enumerate(walls)]
            rrows += [[f"stage {k}", fmt(v, ".2f")] for k, v in stages.items()]
            rrows += [["candidate median ms", fmt(ev.runtime_ms)], ["eager median ms", fmt(base.median_ms("eager"))]]
            report.append(table("KernelBench level1/19_ReLU: one whole evaluation (s)", ["what", "value"], rrows))
            results["relu"] = {"walls_s": walls, "stages_s": stages, "runtime_ms": ev.runtime_ms,
                               "eager_ms": base.median_ms("eager")}
    env = results["examples"][0]["environment"] if results["examples"] else {}
    header = f"device: {env.get('device_name')} · torch {env.get('torch')} · CUDA {env.get('cuda')} · {time.strftime('%Y-%m-%d')}"
    text = header + "\n" + "\n".join(report)
    print(text, flush=True)
    results["report"] = text
    return results


def _checkpoint(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Write what is measured so far, so a run cut off by a time limit still leaves data."""
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", default=str(ROOT / "examples"))
    ap.add_argument("--kernelbench", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-reps", type=int, default=None,
                    help="cap on timed repetitions ([pytorch.timing] max_reps), to weigh the "
                         "timing stage's cost against the stability table")
    args = ap.parse_args()
    results = asyncio.run(main_async(args))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
