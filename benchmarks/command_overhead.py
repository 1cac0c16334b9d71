"""Benchmark (issue 25): what the harness adds to an evaluation of a command problem over the
bare work the evaluation consists of (its builds and its runs, done by hand).

For each repeat: the reference and the design are built and run by hand in a scratch directory
(`/bin/sh -c` the problem's commands, timed around each), giving the bare cost of one build
and one run of each; then the design is evaluated by the harness (sandboxed worker, hidden
inputs, hashes, comparisons, paired timing), and the evaluation's own record says how many
builds and runs it made. Overhead = the evaluation's wall time - (its builds x the bare build
time + its runs x the bare run time). Prints a table.

Usage: python benchmarks/command_overhead.py [--example examples/command/window_sums] [--design designs/fast]
       [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import environment, load_config  # noqa: E402
from stratagem.core.design import Design  # noqa: E402
from stratagem.domains import load_problem  # noqa: E402
from stratagem.domains.command.domain import draw_inputs, spec_of  # noqa: E402
from stratagem.domains.command.runner import fill  # noqa: E402
from stratagem.evaluation.executors import make_executor  # noqa: E402
from stratagem.evaluation.service import Evaluator  # noqa: E402


def timed(cmd: str, cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", cmd], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def bare(example: Path, design: dict[str, str], runs: int) -> dict[str, float]:
    """Median seconds of one build and one run of the reference and of the design, by hand."""
    problem = load_problem(example)
    spec = spec_of(problem)
    values = {"seed": draw_inputs(spec)["seed"], **{s.name: s.low for s in spec.sizes}}
    values.update(draw_inputs(spec)["sizes"])
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for who, files in (("reference", None), ("design", design)):
            d = Path(tmp) / who
            shutil.copytree(example / spec.reference, d)
            for f in spec.fixed:
                (d / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(example / f, d / f)
            for name, text in (files or {}).items():
                (d / name).write_text(text)
            out[f"{who}_build_s"] = timed(spec.build.command, d)
            cmd = fill(spec.run.command, {**values, "python": sys.executable})
            out[f"{who}_run_s"] = statistics.median(timed(cmd, d) for _ in range(runs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", default=str(ROOT / "examples/command/window_sums"))
    ap.add_argument("--design", default="designs/fast")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    example = Path(args.example)
    design = {p.name: p.read_text() for p in sorted((example / args.design).iterdir()) if p.is_file()}
    cfg = load_config(None, {"evaluation": {"device": args.device, "workers_per_gpu": 1}}).evaluation
    evaluator = Evaluator(cfg, make_executor(cfg, environment()))
    problem = load_problem(example)
    rows = []
    for i in range(args.repeats):
        b = bare(example, design, runs=5)
        t0 = time.monotonic()
        ev = asyncio.run(evaluator.evaluate(problem, Design(files=design), with_baseline=False))
        wall = time.monotonic() - t0
        s = ev.summary()
        timing = s["validators"]["timing"]["details"]
        corr = s["validators"]["correctness"]["details"]
        trials = len(corr["trials"])
        attempts = len(timing["attempts"])
        spec = spec_of(problem)
        # the runs the evaluation made: correctness (each trial: design and reference), the timing's
        # expected output and warm-ups, then every attempt's block pairs
        ref_runs = trials + 1 + spec.timing.warmup + attempts * spec.timing.pairs * spec.timing.runs
        des_runs = trials + spec.timing.warmup + attempts * spec.timing.pairs * spec.timing.runs
        work = b["reference_build_s"] + b["design_build_s"] + ref_runs * b["reference_run_s"] + des_runs * b["design_run_s"]
        rows.append((i + 1, s["status"], wall, work, wall - work, ref_runs + des_runs, b))
        print(f"repeat {i + 1}: {s['status']}, wall {wall:.2f} s, bare work {work:.2f} s, "
              f"{ref_runs + des_runs} runs", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d')} · {example.name} · {args.design} · device {args.device}\n")
    print("| repeat | status | evaluation wall s | bare builds + runs s | harness overhead s | overhead per run ms | runs | "
          "bare build s (ref/design) | bare run ms (ref/design) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, status, wall, work, over, runs, b in rows:
        print(f"| {n} | {status} | {wall:.2f} | {work:.2f} | {over:.2f} ({100 * over / wall:.0f}%) | {1e3 * over / runs:.1f} | "
              f"{runs} | {b['reference_build_s']:.2f} / {b['design_build_s']:.2f} | "
              f"{1e3 * b['reference_run_s']:.1f} / {1e3 * b['design_run_s']:.1f} |")


if __name__ == "__main__":
    main()
