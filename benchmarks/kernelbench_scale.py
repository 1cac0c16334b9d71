"""The harness at KernelBench's real sizes (issue 22): whole evaluations of honest candidates.

For each KernelBench problem (as shipped: level 1 inputs reach 1.6e9 elements, 6.4 GB), the
honest candidate is the problem's own `Model` renamed `ModelNew`. Each problem is evaluated
twice with one evaluator: cold (empty compile and baseline caches; the baselines are measured
first) and warm (the same evaluation again: caches filled). Prints a table per measurement:

  1. per problem: status, the whole evaluation cold and warm (s), and the warm stages (s);
  2. the baselines' cost per problem (s): each compiled mode's compile, check and timing;
  3. the judge: its work before and after the worker's end, and how records travelled.

Usage: python benchmarks/kernelbench_scale.py --kernelbench DIR [--problems level1/19_ReLU,...]
       [--device cuda] [--out results.json] [--memory-fraction F] [--baselines eager,compile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402

SAMPLE = [
    "level1/19_ReLU", "level1/25_Swish", "level1/23_Softmax", "level1/1_Square_matrix_multiplication_",
    "level1/8_Matmul_with_irregular_shapes_", "level1/5_Matrix_scalar_multiplication", "level1/38_L1Norm_",
    "level1/42_Max_Pooling_2D", "level1/45_Average_Pooling_2D", "level1/63_conv_standard_2D__square_input__square_kernel",
    "level1/95_CrossEntropyLoss", "level1/97_ScaledDotProductAttention", "level2/1_Conv2D_ReLU_BiasAdd",
    "level2/12_Gemm_Multiply_LeakyReLU", "level3/1_MLP", "level3/44_MiniGPTBlock",
]
STAGES = ("load", "correctness", "integrity", "shapes", "timing", "roofline")


def honest(source: str) -> str:
    """The problem's own Model as ModelNew: what an honest candidate computes, unchanged."""
    out = re.sub(r"\bclass Model\b", "class ModelNew", source)
    return re.sub(r"super\(\s*Model\s*,", "super(ModelNew,", out)


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([f"\n### {title}\n", line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *[line(r) for r in cells[1:]]])


def f(x: Any, spec: str = ".1f") -> str:
    return format(x, spec) if isinstance(x, int | float) else "-"


def summary(ev: Any, wall_s: float) -> dict[str, Any]:
    v = ev.verdict
    stages = {r.name: r.duration_s for r in v.results}
    corr = v.result("correctness")
    judge = (corr.details.get("judge") if corr is not None and corr.outcome == "passed" else None) or {}
    load = v.result("load")
    base = ev.baseline
    costs = {m: d.get("cost_s") for m, d in (base.modes.items() if base is not None else []) if d.get("cost_s")}
    timing = v.result("timing")
    td = timing.details if timing is not None else {}
    unstable = {m: (d.get("stability") or {}).get("reasons") for m, d in (base.modes.items() if base is not None else [])
                if not (d.get("stability") or {}).get("stable", True)}
    return {"timing_phases_s": td.get("phases_s"), "profile_s": (td.get("profile") or {}).get("profile_s"),
            "roofline": {k: v for k, v in (v.result("roofline").details if v.result("roofline") else {}).items()
                         if k in ("recalibrated", "note", "floor_ms", "bound")},
            "timing_attempts": len(td.get("attempts") or []), "timing_wall_s": td.get("timing_wall_s"),
            "pairs": td.get("pairs"), "calls_per_block": td.get("calls_per_block"),
            "busy": {k: (td.get("busy") or {}).get(k) for k in ("windows", "void_windows", "waited_s", "seen")},
            "stability": (td.get("stability") or {}).get("verdict"),
            "baseline_unstable": unstable, "status": v.status, "failures": [f"{r.name}: {r.reason}"[:300] for r in v.failures], "wall_s": wall_s,
            "stages_s": stages, "judge": judge, "memory": (load.details.get("memory") if load else None),
            "memory_peak_gb": {r.name: r.details.get("memory_peak_gb") for r in v.results
                               if isinstance(r.details, dict) and r.details.get("memory_peak_gb") is not None},
            "records": corr.details.get("records") if corr is not None else None,
            "anchored": corr.details.get("anchored") if corr is not None else None,
            "baseline_cached": base.cached if base is not None else None, "baseline_cost_s": costs,
            "runtime_ms": ev.runtime_ms, "sandbox_s": ev.sandbox.get("duration_s")}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    kb = Path(args.kernelbench)
    kb = kb / "KernelBench" if (kb / "KernelBench").is_dir() else kb
    names = args.problems.split(",") if args.problems else SAMPLE
    cache = Path(tempfile.mkdtemp(prefix="kb-scale-cache-"))
    ev_cfg: dict[str, Any] = {"device": args.device, "workers_per_gpu": 1, "cache_dir": str(cache)}
    if args.memory_fraction:
        ev_cfg["gpu_memory_fraction"] = args.memory_fraction
    if args.baselines:
        ev_cfg["baselines"] = args.baselines.split(",")
    cfg = load_config(None, {"evaluation": ev_cfg}).evaluation
    evaluator = make_evaluator(cfg)
    out: dict[str, Any] = {}
    for name in names:
        path = kb / f"{name}.py"
        if not path.exists():
            print(f"{name}: not found under {kb}", flush=True)
            continue
        problem = load_problem(path)
        design = candidate_design(honest(path.read_text()))
        runs = []
        for label in ("cold", "warm")[: args.repeats]:
            t0 = time.monotonic()
            ev = await evaluator.evaluate(problem, design)
            s = summary(ev, time.monotonic() - t0)
            runs.append(s)
            print(f"[{s['wall_s']:6.1f}s] {name} {label}: {s['status']} "
                  f"{' '.join(f'{k}={f(v)}' for k, v in s['stages_s'].items())} {s['failures'][:1]} "
                  f"timing={s['stability']} busy={s['busy']}", flush=True)
        out[name] = runs
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return out


def report(out: dict[str, Any]) -> str:
    rows, base_rows, judge_rows, memory_rows = [], [], [], []
    for name, runs in out.items():
        cold, warm = runs[0], runs[-1]
        plan = cold.get("memory") or {}
        peaks = cold.get("memory_peak_gb") or {}
        if plan:
            top = max(peaks.values(), default=None)
            memory_rows.append([name, f(plan.get("inputs_gb"), ".2f"), f(plan.get("output_gb"), ".2f"),
                                f(plan.get("worker_needs_gb"), ".2f"),
                                *[f(peaks.get(s), ".2f") for s in ("correctness", "integrity", "shapes", "timing")],
                                "yes" if top is not None and top <= plan.get("worker_needs_gb", 0) else "NO"])
        st = warm["stages_s"]
        rows.append([name, warm["status"], f(cold["wall_s"]), f(warm["wall_s"]) if len(runs) > 1 else "-",
                     *[f(st.get(s)) for s in STAGES], f(warm["runtime_ms"], ".3f")])
        for mode, c in (cold["baseline_cost_s"] or {}).items():
            base_rows.append([name, mode, f(c.get("compile")), f(c.get("check")), f(c.get("timing"))])
        j = warm["judge"] or {}
        judge_rows.append([name, f(j.get("before_worker_end_s"), ".2f"), f(j.get("judging_s"), ".2f"),
                           f(j.get("work_s"), ".2f"), "; ".join(n for n in j.get("notes", []) if "records" in n)])
    return "\n".join([
        table("Whole evaluations of honest candidates (s; stages of the warm run)",
              ["problem", "status", "cold", "warm", *STAGES, "runtime ms"], rows),
        table("Baselines measured cold (s per compiled mode; eager is timed beside each)",
              ["problem", "mode", "compile", "check", "timing"], base_rows),
        table("The judge (warm run, s)", ["problem", "before worker end", "after", "work", "records"], judge_rows),
        table("The memory plan against each stage's measured peak (GiB, cold run)",
              ["problem", "inputs", "output", "plan", "correctness", "integrity", "shapes", "timing", "within"],
              memory_rows),
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--problems", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=2, choices=(1, 2))
    ap.add_argument("--memory-fraction", type=float, default=None)
    ap.add_argument("--baselines", default="", help="comma-separated modes (default: the device's)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    print(report(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
