"""Benchmark: what the integrity checks add to an evaluation (issues 3 and 11).

For each problem/candidate pair, evaluates the candidate several times (fresh workers) and
prints the median durations of: the plain correctness trials and timing (the base), and the
integrity checks on top of them: the randomised-parameters and off-distribution trials
(inside the correctness stage), the integrity and shapes stages (and provenance under
--integrity strict), and the judge's time after the worker ended (what it adds to the
evaluation's wall time; its start-up and sampled reference calls overlap the worker).
`added %`: integrity, shapes, provenance and the judge over correctness (all its trials) and
timing (target: at most 20%); `added incl. new trials %`: the randomised-parameters and
off-distribution trials counted as added too, over the plain trials and timing.

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
from stratagem.evaluation.api import make_evaluator, read_design  # noqa: E402

STAGES = ("correctness", "integrity", "shapes", "provenance", "timing")
PARTS = ("trials", "params+offdist", "integrity", "shapes", "provenance", "timing", "judge")


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
            design = read_design(cand, problem)
            per: dict[str, list[float]] = {s: [] for s in PARTS}
            status = "?"
            for _ in range(args.repeats):
                ev = await evaluator.evaluate(problem, design, with_baseline=False)
                status = ev.verdict.status
                for part, sec in parts(ev).items():
                    per[part].append(sec)
            med = {s: statistics.median(v) if v else 0.0 for s, v in per.items()}
            checks = sum(med[s] for s in ("integrity", "shapes", "provenance", "judge"))
            base = med["trials"] + med["params+offdist"] + med["timing"]
            plain = med["trials"] + med["timing"]
            rows.append([f"{d.name}/{cand.stem}", status] + [f"{med[s]:.3f}" for s in PARTS]
                        + [f"{100 * checks / base:.0f}" if base else "-",
                           f"{100 * (checks + med['params+offdist']) / plain:.0f}" if plain else "-"])
            print(rows[-1], flush=True)
    header = ["candidate", "status", *[f"{s} s" for s in PARTS], "added %", "added incl. new trials %"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · integrity {args.integrity} · "
          f"median of {args.repeats} evaluations")
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def parts(ev: Any) -> dict[str, float]:
    """Seconds per part of one evaluation (see the module docstring)."""
    out: dict[str, float] = {}
    for r in ev.verdict.results:
        if r.name not in STAGES or r.duration_s is None:
            continue
        d = r.details or {}
        if r.name == "correctness":
            extra = sum(float((d.get(k) or {}).get("duration_s") or 0.0)
                        for k in ("randomised_parameters", "off_distribution"))
            out["trials"] = r.duration_s - extra
            out["params+offdist"] = extra
            out["judge"] = float((d.get("judge") or {}).get("after_worker_s") or 0.0)
        else:
            out[r.name] = r.duration_s
    return out


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
