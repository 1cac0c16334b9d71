"""Benchmark: what the queue executor adds per evaluation over the local executor (issue 17).

Evaluates one candidate N times through the local executor, then N times through the queue
executor served by one `queue_worker` process polling at its default interval (0.5 s; the
run polls at `queue_poll_s`, 0.5 s by default), and prints the median wall time of each and
the difference. Both use this machine's device.

Usage: python benchmarks/queue_overhead.py [--device cpu] [--repeats 5] [--problem P --candidate C]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator, read_design  # noqa: E402

FAST = {"baselines": ["eager"], "correctness_trials": 2,
        "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}


async def times(evaluation: dict, problem, design, n: int) -> list[float]:
    ev = make_evaluator(load_config(None, {"evaluation": evaluation}).evaluation)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await ev.evaluate(problem, design, with_baseline=False)
        out.append(time.perf_counter() - t)
        assert r.verdict.status == "valid", r.verdict.report()
    await ev.executor.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--problem", default=str(ROOT / "tests/adversarial/problems/linear_relu.py"))
    ap.add_argument("--candidate", default=str(ROOT / "tests/adversarial/honest/addmm_fused.py"))
    args = ap.parse_args()
    problem = load_problem(args.problem)
    design = read_design(Path(args.candidate), problem)
    local = asyncio.run(times({**FAST, "device": args.device}, problem, design, args.repeats))
    with tempfile.TemporaryDirectory() as q:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        dev = "cuda:0" if args.device.startswith("cuda") else "cpu"
        w = subprocess.Popen([sys.executable, "-m", "stratagem.evaluation.queue_worker", "--queue", q,
                              "--device", dev], env=env, stderr=subprocess.DEVNULL)
        try:
            queued = asyncio.run(times({**FAST, "device": args.device, "executor": "queue", "queue_dir": q},
                                       problem, design, args.repeats))
        finally:
            w.kill()
            w.wait()
    ml, mq = statistics.median(local), statistics.median(queued)
    print(f"\n{time.strftime('%Y-%m-%d')} · device {args.device} · {args.repeats} evaluations each")
    print("| executor | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, xs in (("local", local), ("queue (worker polling 0.5 s)", queued)):
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    print(f"\nqueue overhead per evaluation: {mq - ml:+.2f} s (median), {100 * (mq - ml) / ml:+.0f}%")


if __name__ == "__main__":
    main()
