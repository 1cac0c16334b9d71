"""What the red-team audit costs per accepted attempt, beside the harness's own evaluation
(issue 46): each problem's honest candidate (its `Model` renamed `ModelNew`) and any cheat
files given are evaluated by the harness (the default graph, twice: cold then warm; the warm
one is reported) and audited (the domain's `breach` graph). Prints a table per measurement:

  1. per problem and candidate: the harness's verdict and time, the audit's verdict and time;
  2. the audit's checks: each one's verdict and cost (s).

Usage: python benchmarks/breach_audit_cost.py [--kernelbench DIR --problems level1/19_ReLU,...]
       [--problem FILE ...] [--cheat FILE ...] [--device cuda] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kernelbench_scale import f, honest, table  # noqa: E402

from stratagem.config import load_config  # noqa: E402
from stratagem.core.graph import ValidatorGraph  # noqa: E402
from stratagem.domains import get_domain, load_problem  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402


def problem_paths(args: argparse.Namespace) -> list[Path]:
    out = [Path(p) for p in args.problem]
    if args.kernelbench:
        kb = Path(args.kernelbench)
        kb = kb / "KernelBench" if (kb / "KernelBench").is_dir() else kb
        out += [kb / f"{n}.py" for n in args.problems.split(",") if n]
    return out


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cfg = load_config(None, {"evaluation": {"device": args.device}}).evaluation
    evaluator = make_evaluator(cfg)
    rows: list[dict[str, Any]] = []
    try:
        for path in problem_paths(args):
            problem = load_problem(path)
            graph = ValidatorGraph.of(get_domain(problem.domain).graphs["breach"])
            candidates = {"honest": honest(path.read_text())}
            candidates.update({Path(c).stem: Path(c).read_text() for c in args.cheat})
            for label, source in candidates.items():
                design = candidate_design(source)
                for _ in range(2):  # cold, then warm: the warm evaluation is reported
                    t0 = time.monotonic()
                    ev = await evaluator.evaluate(problem, design, with_baseline=False)
                    harness_s = time.monotonic() - t0
                t0 = time.monotonic()
                audit = await evaluator.evaluate(problem, design, with_baseline=False, graph=graph)
                audit_s = time.monotonic() - t0
                r = audit.verdict.result("breach_audit")
                checks = list((r.details or {}).get("checks") or []) if r is not None else []
                row = {"problem": path.stem, "candidate": label, "harness": ev.verdict.status,
                       "harness_s": harness_s, "audit": audit.verdict.status, "audit_s": audit_s,
                       "audit_failures": [f"{x.name}: {x.reason}"[:200] for x in audit.verdict.failures],
                       "checks": checks}
                rows.append(row)
                print(f"[{audit_s:6.1f}s] {path.stem} {label}: harness {row['harness']} ({harness_s:.1f} s), "
                      f"audit {row['audit']} {row['audit_failures'][:1]}", flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    finally:
        await evaluator.executor.aclose()
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(c.get("check") for r in rows for c in r["checks"]))
    return "\n".join([
        table("The harness and the audit per candidate (s; the harness's warm evaluation)",
              ["problem", "candidate", "harness", "harness s", "audit", "audit s", "audit / harness"],
              [[r["problem"], r["candidate"], r["harness"], f(r["harness_s"]), r["audit"], f(r["audit_s"]),
                f(r["audit_s"] / r["harness_s"], ".2f") if r["harness_s"] else "-"] for r in rows]),
        table("The audit's checks (s; FAIL where the check failed)",
              ["problem", "candidate", *[str(n) for n in names]],
              [[r["problem"], r["candidate"], *[
                  next((f(c.get("cost_s"), ".2f") + ("" if c.get("ok") is not False else " FAIL")
                        for c in r["checks"] if c.get("check") == n), "-") for n in names]] for r in rows]),
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", default="")
    ap.add_argument("--problems", default="level1/19_ReLU")
    ap.add_argument("--problem", action="append", default=[], help="a problem file (repeat)")
    ap.add_argument("--cheat", action="append", default=[], help="a cheating candidate to audit too (repeat)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    print(report(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
