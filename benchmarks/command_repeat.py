"""Benchmark (issue 43, item 3): does a command problem's speedup repeat?

Evaluates one design of a command problem N times (fresh workers, fresh hidden seeds) and prints
each evaluation's paired speedup, its interval, the sizes it was timed at and its stability, then
the spread of the ratios and whether every interval holds every other evaluation's ratio.

Usage: python benchmarks/command_repeat.py [--problem examples/command/window_sums/problem.toml]
       [--design examples/command/window_sums/designs/fast] [--n 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default=str(ROOT / "examples/command/window_sums/problem.toml"))
    ap.add_argument("--design", default=str(ROOT / "examples/command/window_sums/designs/fast"))
    ap.add_argument("--n", type=int, default=5)
    args = ap.parse_args()
    rows = []
    print("| # | speedup [95% CI] | timed at | stability |\n|---|---|---|---|")
    for i in range(args.n):
        out = subprocess.run([sys.executable, "-m", "stratagem", "eval", args.problem, args.design, "--json"],
                             capture_output=True, text=True, check=False)
        d = json.loads(out.stdout)
        det = ((d.get("validators") or {}).get("timing") or {}).get("details") or {}
        r = (det.get("speedup") or {})
        rows.append(r)
        print(f"| {i + 1} | {r.get('ratio', 0):.1f}x [{r.get('low', 0):.1f}, {r.get('high', 0):.1f}] | "
              f"{det.get('sizes')} | {(det.get('stability') or {}).get('verdict')} |", flush=True)
    ratios = [r["ratio"] for r in rows if r]
    held = sum(1 for a in rows for b in rows if a is not b and a and b and a["low"] <= b["ratio"] <= a["high"])
    pairs = len(rows) * (len(rows) - 1)
    print(f"\nratios {min(ratios):.1f}x-{max(ratios):.1f}x ({max(ratios) / min(ratios):.2f}x apart); "
          f"an evaluation's interval held another's ratio in {held} of {pairs} pairs")


if __name__ == "__main__":
    main()
