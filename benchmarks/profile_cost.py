"""Benchmark: what the per-kernel profile at the end of the timing stage costs (issue 15), on a
GPU: for each example candidate, the timing stage's seconds and the profile's own seconds
(`profile_s`), with the heaviest kernel it found.

Usage: python benchmarks/profile_cost.py [--only 01_elementwise,...] [--device cuda]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator, read_design  # noqa: E402


async def main_async(args: argparse.Namespace) -> None:
    over = {"device": args.device, "workers_per_gpu": 1, "baselines": ["eager"]}
    evaluator = make_evaluator(load_config(None, {"evaluation": over}).evaluation)
    dirs = sorted(p for p in (ROOT / "examples").iterdir() if (p / "problem.py").exists())
    if args.only:
        dirs = [d for d in dirs if d.name in args.only.split(",")]
    rows = []
    for d in dirs:
        problem = load_problem(d / "problem.py")
        for cand in sorted((d / "candidates").glob("*.py")):
            ev = await evaluator.evaluate(problem, read_design(cand, problem), with_baseline=False)
            t = next((r for r in ev.verdict.results if r.name == "timing"), None)
            prof = (t.details or {}).get("profile") or {} if t is not None else {}
            top = prof.get("kernels") or [["-", 0.0]]
            rows.append([f"{d.name}/{cand.stem}", ev.verdict.status, f"{t.duration_s:.2f}" if t and t.duration_s else "-",
                         f"{prof.get('profile_s', 0.0):.3f}", str(len(prof.get("kernels") or [])),
                         f"{top[0][0][:40]} {top[0][1]:.1f} us"])
            print(rows[-1], flush=True)
    await evaluator.executor.aclose()
    header = ["candidate", "status", "timing s", "profile s", "kernels", "heaviest kernel"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device}")
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="cuda")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
