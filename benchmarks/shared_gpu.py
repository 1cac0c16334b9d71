"""Several `stratagem run` processes sharing one device: the situation where, before the device
lock became shared/exclusive, baselines compiled under the timing lock, other workers' work ran
during timing and an honest candidate timed out while it waited.

    python benchmarks/shared_gpu.py --runs 3 --problem examples/03_softmax/problem.py \
        --recipes compile,max-autotune-no-cudagraphs --device cuda

Starts the runs at once with one shared cache directory (so one lock per device), waits, then
reads every run's database: each evaluation's lock windows (from its validators' details) and
verdict. Prints, per run, the designs and their paired speedups, the timeouts, and the number
of exclusive (timing) windows that overlap any window of another run (the target is 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def windows(db: Path) -> tuple[list[dict], list[dict]]:
    """(lock windows of every evaluation, one summary row per evaluation)."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT design_id, status, speedup, validators, stability FROM evaluations").fetchall()
    ws, evs = [], []
    for design, status, speedup, validators, stability in rows:
        vs = json.loads(validators)
        kinds = [v.get("kind") for v in vs if v.get("outcome") == "failed"]
        for v in vs:
            ws += list((v.get("details") or {}).get("locks") or [])
        evs.append({"design": design[:10], "status": status, "speedup": speedup, "failures": kinds,
                    "stability": json.loads(stability or "{}").get("verdict")})
    return ws, evs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--problem", default="examples/03_softmax/problem.py")
    ap.add_argument("--recipes", default="compile,max-autotune-no-cudagraphs")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="shared-gpu-"))
    cfg = base / "run.toml"
    recipes = ", ".join(f'"{r}"' for r in args.recipes.split(","))
    cfg.write_text(f'[search]\nrecipes = [{recipes}]\n[evaluation]\nworkers_per_gpu = 2\n')
    env = {**os.environ, "STRATAGEM_CACHE_DIR": str(base / "cache")}
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "stratagem", "run", str(ROOT / args.problem), "--device",
                               args.device, "--config", str(cfg), "--run-dir", str(base / f"run{i}"), "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(args.runs)]
    outs = [p.communicate() for p in procs]
    wall = time.time() - t0
    per = {i: windows(base / f"run{i}" / "run.db") for i in range(args.runs)}
    overlaps = 0
    for i, (wi, _) in per.items():
        for j, (wj, _) in per.items():
            if i == j:
                continue
            for x in (w for w in wi if w["mode"] == "exclusive"):
                for y in wj:
                    if min(x["released_at"], y["released_at"]) > max(x["acquired_at"], y["acquired_at"]):
                        overlaps += 1
    print(f"{args.runs} runs of {args.problem} with recipes {args.recipes} on {args.device}: {wall:.0f} s wall\n")
    print("| run | exit | design | status | failures | speedup vs eager | stability | max lock wait s |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (ws, evs) in per.items():
        wait = max((w["waited_s"] for w in ws), default=0.0)
        for e in evs:
            sp = f"{e['speedup']:.3f}" if e["speedup"] else "-"
            print(f"| {i} | {procs[i].returncode} | {e['design']} | {e['status']} | {','.join(filter(None, e['failures'])) or '-'} "
                  f"| {sp} | {e['stability']} | {wait:.1f} |")
    print(f"\nexclusive windows overlapping another run's windows: {overlaps}")
    for i, (_o, err) in enumerate(outs):
        if procs[i].returncode != 0:
            print(f"run {i} stderr tail:\n{err[-1500:]}")
    if args.out:
        args.out.write_text(json.dumps({"wall_s": wall, "overlaps": overlaps,
                                        "runs": {i: evs for i, (_, evs) in per.items()}}, indent=1))


if __name__ == "__main__":
    main()
