"""Benchmark: what the integrity stages add to an evaluation (issue 3).

For each problem/candidate pair, evaluates the candidate several times (fresh workers) and
prints the median stage durations: correctness, integrity, shapes, timing (and provenance
under --integrity strict), and the integrity stages' added cost as a percentage of
correctness + timing (target: at most 20%).

Usage: python benchmarks/integrity_cost.py [--device cuda] [--repeats 3] [--integrity lenient]
       [--examples examples] [--only 01_elementwise,...] [--timing-budget-ms 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator, read_candidate  # noqa: E402

STAGES = ("correctness", "integrity", "shapes", "provenance", "timing")


async def main_async(args: argparse.Namespace) -> None:
    over: dict[str, Any] = {"device": args.device, "workers_per_gpu": 1, "integrity": args.integrity,
                            "baselines": ["eager"], "timing": {"budget_ms": args.timing_budget_ms}}
    evaluator = make_evaluator(load_config(None, {"evaluation": over}).evaluation)
    dirs = sorted(p for p in Path(args.examples).iterdir() if (p / "problem.py").exists())
    if args.only:
        dirs = [d for d in dirs if d.name in args.only.split(",")]
    rows = []
    for d in dirs:
        problem = load_problem(d / "problem.py")
        for cand in sorted((d / "candidates").glob("*.py")):
            design = read_candidate(cand)
            per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
            status = "?"
            for _ in range(args.repeats):
                ev = await evaluator.evaluate(problem, design, with_baseline=False)
                status = ev.verdict.status
                for r in ev.verdict.results:
                    if r.name in per_stage and r.duration_s is not None:
                        per_stage[r.name].append(r.duration_s)
            med = {s: statistics.median(v) if v else 0.0 for s, v in per_stage.items()}
            base = med["correctness"] + med["timing"]
            added = med["integrity"] + med["shapes"] + med["provenance"]
            rows.append([f"{d.name}/{cand.stem}", status] + [f"{med[s]:.3f}" for s in STAGES]
                        + [f"{100 * added / base:.0f}" if base else "-"])
            print(rows[-1], flush=True)
    header = ["candidate", "status", *[f"{s} s" for s in STAGES], "added %"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · integrity {args.integrity} · "
          f"median of {args.repeats} evaluations")
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", default=str(ROOT / "examples"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--integrity", default="lenient", choices=["lenient", "strict"])
    ap.add_argument("--only", default=None)
    ap.add_argument("--timing-budget-ms", type=float, default=500.0)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
