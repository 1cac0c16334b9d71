"""Benchmark: evaluations per minute through the local and the Ray executor (issue 29).

Submits N evaluations of one honest candidate at once to an evaluator over the local executor
with `--slots` CPU slots (or the device's GPU slots), then over the Ray executor with as many
runner actors of one slot each (the same number of slots in all) (a local Ray instance started for the benchmark, or `--ray-address`), and prints
evaluations per minute for each. Baselines are not measured (`with_baseline=False`): the
figure is the executors' throughput of design evaluations, the same work in both.

Usage: python benchmarks/executor_throughput.py [--device cpu] [--slots 1,2,4] [--evaluations 8]
       [--executors local,ray] [--problem P --candidate C]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator, read_design  # noqa: E402

FAST = {"baselines": ["eager"], "correctness_trials": 2,
        "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}


async def throughput(evaluation: dict, problem, design, n: int) -> tuple[float, int, set[str]]:
    """(wall seconds for `n` evaluations submitted at once, how many were valid, slots used)."""
    ev = make_evaluator(load_config(None, {"evaluation": evaluation}).evaluation)
    try:
        await ev.evaluate(problem, design, with_baseline=False)  # warm: Ray's actors, the caches
        t = time.perf_counter()
        out = await asyncio.gather(*(ev.evaluate(problem, design, with_baseline=False) for _ in range(n)))
        wall = time.perf_counter() - t
    finally:
        await ev.executor.aclose()
    where = {f"{r.environment.get('host')}/{r.environment.get('physical_device')}/{r.environment.get('slot', '')}"
             for r in out}
    return wall, sum(r.verdict.status == "valid" for r in out), where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--slots", default="1,2,4", help="CPU slots (local) and runner actors (Ray) to try")
    ap.add_argument("--evaluations", type=int, default=8)
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--problem", default=str(ROOT / "tests/adversarial/problems/linear_relu.py"))
    ap.add_argument("--candidate", default=str(ROOT / "tests/adversarial/honest/addmm_fused.py"))
    args = ap.parse_args()
    problem = load_problem(args.problem)
    design = read_design(Path(args.candidate), problem)
    rows = []
    for k in [int(x) for x in args.slots.split(",")]:
        for name in args.executors.split(","):
            cfg: dict = {**FAST, "device": args.device, "executor": name}
            if args.device == "cpu":  # k slots in all: k local slots, or k Ray runners of one slot each
                cfg["cpu_slots"] = 1 if name == "ray" else k
            if name == "ray":
                cfg["ray_actors"] = k
                if args.ray_address:
                    cfg["ray_address"] = args.ray_address
            wall, valid, _ = asyncio.run(throughput(cfg, problem, design, args.evaluations))
            rows.append((name, k, wall, valid))
            print(f"{name} x{k}: {args.evaluations} evaluations in {wall:.1f} s", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · {os.cpu_count()} cores · load average "
          f"{os.getloadavg()[0]:.1f} · {args.evaluations} evaluations submitted at once")
    print("| executor | slots / actors | wall s | evaluations per minute | valid | vs 1 slot |")
    print("|---|---:|---:|---:|---:|---:|")
    one = {name: 60 * args.evaluations / wall for name, k, wall, _ in rows if k == 1}
    for name, k, wall, valid in rows:
        per_min = 60 * args.evaluations / wall
        rel = f"{per_min / one[name]:.2f}x" if name in one else ""
        print(f"| {name} | {k} | {wall:.1f} | {per_min:.1f} | {valid}/{args.evaluations} | {rel} |")


if __name__ == "__main__":
    main()
