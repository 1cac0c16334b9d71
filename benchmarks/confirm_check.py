"""Benchmark (issue 23): does a run's confirmation round hold an independent re-timing?

For each example: a `recipes` search (no LLM), whose end-of-run confirmation round re-times
the top designs together; then a second, independent round (fresh processes, new seeds, the
order rotated again) stands for an independent interleaved re-timing. Printed per design: the
search-time ratio, the confirmed ratio and a warm loop's, the re-check's ratio, and whether the
search-time interval and the confirmed interval hold the re-check. Target: the confirmed
interval holds the re-check for at least 9 of 10 designs.

Usage: python benchmarks/confirm_check.py [--device cpu] [--only 01_elementwise,02_reduction]
       [--problems A.py,B.py] [--runs-dir runs/confirm] [--recipes inference_mode,compile] [--baselines eager]

The examples are sized for a GPU (01_elementwise's eager call takes ~2.8 s on 2 CPU cores);
on the CPU, `--problems` takes problem files of CPU size instead.
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
from stratagem.search.api import confirm_stored_run, start_run  # noqa: E402


def _r(d: dict | None) -> str:
    return "-" if not d else f"{d['ratio']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def _holds(d: dict | None, x: float | None) -> str:
    if not d or x is None:
        return "-"
    return "yes" if d["low"] <= x <= d["high"] else "NO"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", default="01_elementwise,02_reduction")
    ap.add_argument("--problems", default=None, help="comma-separated problem files (instead of --only)")
    ap.add_argument("--runs-dir", default=str(ROOT / "runs" / f"confirm-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--recipes", default=None, help="comma-separated subset of the catalog")
    ap.add_argument("--baselines", default=None, help="comma-separated baseline modes (default: the device's)")
    ap.add_argument("--iterations", type=int, default=3)
    args = ap.parse_args()
    search: dict = {"policy": "recipes", "iterations": args.iterations, "confirm_top": 5, "confirm_blocks": 3}
    if args.recipes:
        search["recipes"] = args.recipes.split(",")
    ev: dict = {"device": args.device, "workers_per_gpu": 1}
    if args.baselines:
        ev["baselines"] = args.baselines.split(",")
    cfg = load_config(None, {"evaluation": ev, "search": search})
    rows = []
    files = ([Path(p) for p in args.problems.split(",")] if args.problems
             else [ROOT / "examples" / n / "problem.py" for n in args.only.split(",")])
    for problem in files:
        name = problem.stem if args.problems else problem.parent.name
        t0 = time.monotonic()
        out = asyncio.run(start_run(problem, cfg, Path(args.runs_dir) / name))
        search_s = time.monotonic() - t0
        from stratagem.store.sqlite import RunStore

        with RunStore.open(out.run_dir) as store:
            rounds = store.confirmations()
        if not rounds:
            print(f"{name}: no confirmation round (no ranked design)", flush=True)
            continue
        first = rounds[-1]
        t1 = time.monotonic()
        again = asyncio.run(confirm_stored_run(out.run_dir, top=len(first["designs"]), blocks=3))
        recheck_s = time.monotonic() - t1
        second = {d["design_id"]: d for d in (again or {}).get("designs") or ()}
        for d in first["designs"]:
            x = (second.get(d["design_id"]) or {}).get("vs_eager")
            xr = x["ratio"] if x else None
            rows.append([name, d["design_id"][:10], _r(d.get("search")), _r(d.get("vs_eager")), _r(d.get("warm")),
                         f"{xr:.3f}" if xr else "-", _holds(d.get("search"), xr), _holds(d.get("vs_eager"), xr)])
            print(rows[-1], flush=True)
        eager = first.get("eager_ms") or {}
        print(f"{name}: search {search_s:.0f} s (round included: {first.get('wall_s', 0):.0f} s), "
              f"re-check {recheck_s:.0f} s; eager per block, fresh inputs {eager.get('fresh')} ms, "
              f"warm loop {eager.get('warm')} ms", flush=True)
    head = ["problem", "design", "search time", "confirmed", "warm loop", "re-check", "search holds",
            "confirmed holds"]
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · recipes · confirm 3 blocks, re-check 3 blocks\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    judged = [r for r in rows if r[-1] != "-"]
    print(f"\nconfirmed interval holds the re-check: {sum(r[-1] == 'yes' for r in judged)} of {len(judged)}; "
          f"search-time interval: {sum(r[-2] == 'yes' for r in judged)} of {len(judged)}")


if __name__ == "__main__":
    main()
