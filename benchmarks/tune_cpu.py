"""The tune policy on the CPU (issue 27's CPU benchmark): on examples/command/blocked_scan, whose
best point is known (BLOCK = 32, GROUP = 8, a 64-bit accumulator; per element 8192 / (BLOCK x
GROUP) + BLOCK + 4 x GROUP steps), the best point tune's TPE study has found after each number
of evaluations, against random search (untried feasible points drawn uniformly) at the same
budget, over several seeds.

Every point is measured once on the real sandboxed CPU harness (build, correctness, paired
timing against the reference) and its verdict cached in `--cache` (JSON, keyed by the point), so
the studies of every seed and both methods replay the same measurements: a study is a function
of its seed and its measurements (docs/tune.md), and the comparison sees no noise between
methods. The table gives, per budget, the median over seeds of the best point's steps per
element over the optimum's (1.00: the optimum; 1.17: one step from it), how many seeds found
the optimum and how many were within one step, and the best measured speedup over the
reference (median over seeds).

    .venv/bin/python benchmarks/tune_cpu.py [--seeds 5] [--budgets 5,10,15,20,30] [--cache FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from stratagem.config import environment, load_config
from stratagem.core.design import Design
from stratagem.core.template import Point, Template, parse_template
from stratagem.domains import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search.policies.registry import TuneSettings
from stratagem.search.policies.tune import Trial, TunePolicy, key, read_template_files

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "command" / "blocked_scan"
OPTIMUM = {"BLOCK": 32, "GROUP": 8, "ACC": "unsigned long long"}


def steps(point: Point) -> float:
    """The example's deliberate cost per element (docs in its README)."""
    b, g = int(point["BLOCK"]), int(point["GROUP"])
    return 8192 / (b * g) + b + 4 * g


def within_one_step(point: Point) -> bool:
    return (point["ACC"] == OPTIMUM["ACC"] and abs(int(point["BLOCK"]).bit_length() - 6) <= 1
            and abs(int(point["GROUP"]).bit_length() - 4) <= 1)


class Measurements:
    """Each point's verdict on the real harness, measured once and cached on disk."""

    def __init__(self, template: Template, cache: Path) -> None:
        self.template = template
        self.cache = cache
        self.known: dict[str, dict[str, Any]] = json.loads(cache.read_text()) if cache.is_file() else {}
        self.problem = load_problem(EXAMPLE)
        cfg = load_config(None, {"evaluation": {"device": "cpu", "timeout_s": 120, "compile_timeout_s": 300}}).evaluation
        self.evaluator = Evaluator(cfg, LocalExecutor.for_devices(["cpu"], cfg, environment()), "cpu")
        self.spent_s = 0.0

    def get(self, point: Point) -> dict[str, Any]:
        k = key(point)
        if k not in self.known:
            t0 = time.monotonic()
            design = Design(files=self.template.render(point))
            ev = asyncio.run(self.evaluator.evaluate(self.problem, design, with_baseline=False))
            paired = ev.paired
            self.known[k] = {"status": ev.verdict.status, "speedup": paired.ratio if paired is not None else None}
            self.spent_s += time.monotonic() - t0
            self.cache.write_text(json.dumps(self.known, indent=1, sort_keys=True))
            print(f"  measured {k}: {self.known[k]['status']} {self.known[k]['speedup']}", file=sys.stderr)
        return self.known[k]


def value(m: dict[str, Any]) -> float:
    """What the study is told: the paired speedup when the harness passed and timed the point, else 0."""
    return float(m["speedup"]) if m["status"] in ("valid", "unstable", "unreviewed") and m["speedup"] else 0.0


def tune_study(template: Template, measure: Measurements, seed: int, budget: int) -> list[Point]:
    """The points tune evaluates, in order (TunePolicy.propose over the trials so far)."""
    policy = TunePolicy(template, TuneSettings(seed=seed), seed)
    trials: list[Trial] = []
    infeasible: list[Point] = []
    out: list[Point] = []
    while len(out) < budget:
        known = trials + [Trial(p, 0.0, "infeasible") for p in infeasible]
        proposal = policy.propose(template, known)
        infeasible += [p for p in proposal.infeasible if key(p) not in {key(q) for q in infeasible}]
        if proposal.point is None:
            break
        m = measure.get(proposal.point)
        trials.append(Trial(proposal.point, value(m), m["status"]))
        out.append(proposal.point)
    return out


def random_study(template: Template, seed: int, budget: int) -> list[Point]:
    feasible = list(template.points())
    return random.Random(seed).sample(feasible, min(budget, len(feasible)))


def best_after(points: list[Point], measure: Measurements, n: int) -> Point | None:
    scored = [(value(measure.get(p)), p) for p in points[:n]]
    scored = [s for s in scored if s[0] > 0]
    return max(scored, key=lambda s: s[0])[1] if scored else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budgets", default="5,10,15,20,30")
    ap.add_argument("--cache", type=Path, default=Path("runs/tune_cpu_measurements.json"))
    args = ap.parse_args(argv)
    budgets = [int(x) for x in args.budgets.split(",")]
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    template = parse_template(read_template_files(EXAMPLE / "designs" / "template", "scan.c"))
    measure = Measurements(template, args.cache)
    t0 = time.monotonic()
    studies = {"tune": [tune_study(template, measure, s, max(budgets)) for s in range(args.seeds)],
               "random": [random_study(template, s, max(budgets)) for s in range(args.seeds)]}
    opt = measure.get(OPTIMUM)
    print(f"blocked_scan: {len(list(template.points()))} feasible points of {template.size}; optimum "
          f"{OPTIMUM} ({steps(OPTIMUM):.0f} steps per element, measured {value(opt):.2f}x over the reference)")
    print(f"{len(measure.known)} distinct points measured on the CPU harness "
          f"({measure.spent_s:.0f} s of evaluation this invocation), {args.seeds} seeds, wall {time.monotonic() - t0:.0f} s\n")
    print("| evaluations | method | best's steps / optimum's (median) | found the optimum | within one step | best speedup (median) |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in budgets:
        for method, runs in studies.items():
            bests = [best_after(r, measure, n) for r in runs]
            ratios = [steps(b) / steps(OPTIMUM) if b else float("inf") for b in bests]
            hits = sum(1 for b in bests if b == OPTIMUM)
            near = sum(1 for b in bests if b is not None and within_one_step(b))
            speed = [value(measure.get(b)) if b else 0.0 for b in bests]
            print(f"| {n} | {method} | {statistics.median(ratios):.2f} | {hits}/{len(runs)} | {near}/{len(runs)} "
                  f"| {statistics.median(speed):.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
