"""Benchmark: a `recipes` search per example problem (issue 4): the best design's speedup
against eager and against torch.compile, per problem, plus the run's wall and device time.

Usage: python benchmarks/recipes_run.py [--device cuda] [--examples examples] [--only 01_elementwise,...]
       [--runs-dir runs/bench] [--recipes compile,compile-max-autotune]
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
from stratagem.search.api import show_run, start_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--examples", default=str(ROOT / "examples"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--runs-dir", default=str(ROOT / "runs" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--recipes", default=None, help="comma-separated subset of the catalog")
    ap.add_argument("--correctness", default=None, choices=["reference", "fixed", "calibrated"],
                    help="the correctness rule (docs/correctness.md); default: the product's own")
    args = ap.parse_args()
    search = {"policy": "recipes"}
    if args.recipes:
        search["recipes"] = args.recipes.split(",")
    evaluation: dict[str, object] = {"device": args.device, "workers_per_gpu": 1}
    if args.correctness:
        evaluation["correctness"] = {"mode": args.correctness}
    cfg = load_config(None, {"evaluation": evaluation, "search": search})
    problems = sorted(Path(args.examples).glob("*/problem.py"))
    if args.only:
        problems = [p for p in problems if p.parent.name in args.only.split(",")]
    rows = []
    for p in problems:
        t0 = time.monotonic()
        out = asyncio.run(start_run(p, cfg, Path(args.runs_dir) / p.parent.name))
        r = show_run(out.run_dir)
        best = out.best  # beats eager by more than its interval, or None (best/ holds the reference)
        rt = best.runtime_ms if best else None
        row = [p.parent.name, best.author if best else "- (none beats eager)", f"{rt:.4f}" if rt else "-",
               best.speedup_text() if best else "-", best.compile_text() if best else "-",
               f"{len(r.views)}", f"{sum(v.status == 'valid' for v in r.views)}",
               f"{time.monotonic() - t0:.0f}", f"{r.spend.gpu_seconds:.0f}"]
        rows.append(row)
        print(row, flush=True)
        for v in r.views:  # every design, so a surprising best can be explained from the log
            ms = f"{v.runtime_ms:.4f} ms {v.speedup_text()}" if v.runtime_ms else "-"
            print(f"    {v.author}: {v.status} {ms} {v.report.splitlines()[0] if v.report else ''}",
                  flush=True)
    head = ["problem", "best design", "runtime ms", "vs eager", "vs compile", "designs", "valid",
            "wall s", "device s"]
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · recipes policy · correctness {args.correctness or 'the default rule'}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
