"""Benchmark: where one evaluation's wall time goes (issue 60).

Runs `stratagem eval --json` as a user does (a fresh CLI process), `--repeat` times (the first
is cold where the caches are), and prints one table: the CLI and the parent around the worker,
the worker's start (interpreter, torch's import, the worker module, the device's context: each
measured alone in fresh processes, then what the worker took before its first stage), each
stage's seconds (with the timing stage's own phases and pairs), the judge's work after the
worker ended, and the baselines timed beside the design.

Usage:
  python benchmarks/eval_cost.py --device cuda --kernelbench DIR --problem level1/19_ReLU [--repeat 3]
  python benchmarks/eval_cost.py --device cpu   (the bundled examples/01_elementwise)
  python benchmarks/eval_cost.py --device cpu --problem-file P --candidate C
Options: --candidate FILE (default for KernelBench: the problem's own Model restated as
ModelNew, an honest design); --config FILE; --json-out FILE (every figure, raw).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER_MODULE = "stratagem.domains.pytorch.worker.stages"
WORKER_STAGES = ("load", "build", "correctness", "integrity", "shapes", "timing")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _probe(code: str, repeat: int) -> tuple[float, float | None]:
    """(median wall seconds of a fresh `python -c code`, median of the float it prints last)."""
    walls, inner = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - t)
        last = out.stdout.strip().splitlines()[-1:] or [""]
        try:
            inner.append(float(last[0]))
        except ValueError:
            pass
    return statistics.median(walls), (statistics.median(inner) if inner else None)


def fixed_costs(device: str, repeat: int) -> dict[str, float]:
    """What every worker pays before its first stage, each part alone in fresh processes."""
    start, _ = _probe("pass", repeat)
    torch_wall, _ = _probe("import torch", repeat)
    module_wall, _ = _probe(f"import torch; import {WORKER_MODULE}", repeat)
    sync = "torch.cuda.synchronize()" if device.startswith("cuda") else "pass"
    _, init = _probe("import time, torch; t = time.perf_counter(); "
                     f"torch.zeros(1, device={device!r}).add_(1); {sync}; print(time.perf_counter() - t)", repeat)
    cli, _ = _probe("import sys; sys.argv = ['stratagem', '--help']; import runpy\n"
                    "try:\n runpy.run_module('stratagem', run_name='__main__')\nexcept SystemExit: pass", repeat)
    return {"interpreter_s": start, "torch_import_s": torch_wall - start,
            "worker_module_import_s": module_wall - torch_wall, "device_init_s": init or 0.0,
            "cli_start_s": cli - start}


def honest(source: str) -> str:
    """The problem's own Model as ModelNew: what an honest candidate computes, unchanged."""
    out = re.sub(r"\bclass Model\b", "class ModelNew", source)
    return re.sub(r"super\(\s*Model\s*,", "super(ModelNew,", out)


def one_eval(problem: Path, candidate: Path, device: str, config: Path | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "stratagem", "eval", str(problem), str(candidate), "--device", device, "--json"]
    if config is not None:
        cmd += ["--config", str(config)]
    t = time.perf_counter()
    run = subprocess.run(cmd, env=_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    try:
        body = json.loads(run.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"stratagem eval printed no JSON (exit {run.returncode}):\n{run.stderr[-3000:]}") from None
    body["_outside_wall_s"] = wall
    return body


def breakdown(ev: dict[str, Any], fixed: dict[str, float]) -> list[tuple[str, float | None, str]]:
    """(what, seconds, note) rows for one evaluation."""
    vals = ev.get("validators") or {}
    dur = {k: float(v.get("duration_s") or 0.0) for k, v in vals.items()}
    worker_stages = sum(dur.get(k, 0.0) for k in WORKER_STAGES)
    sandbox = float((ev.get("sandbox") or {}).get("duration_s") or 0.0)
    judge = ((vals.get("correctness") or {}).get("details") or {}).get("judge") or {}
    after = float(judge.get("after_worker_s") or 0.0)
    total = float(ev["_outside_wall_s"])
    inner = float(ev.get("wall_s") or 0.0)
    start = sandbox - worker_stages
    rows: list[tuple[str, float | None, str]] = [
        ("whole evaluation (outside wall)", total, ev.get("status", "?")),
        ("CLI start and exit (outside wall - eval's own)", total - inner, f"alone: {fixed['cli_start_s']:.2f} s"),
        ("parent before/after the worker (incl. baselines' wait)", inner - sandbox - after - dur.get("static_checks", 0)
         - dur.get("roofline", 0), ""),
        ("static_checks (parent)", dur.get("static_checks"), ""),
        ("worker start: up to its first stage", start, "sandbox wall - its stages"),
        ("  of which: interpreter start (alone)", fixed["interpreter_s"], ""),
        ("  of which: torch import (alone)", fixed["torch_import_s"], ""),
        ("  of which: worker module import (alone)", fixed["worker_module_import_s"], ""),
        ("  of which: device init (alone)", fixed["device_init_s"], ""),
    ]
    for k in WORKER_STAGES:
        if k in dur:
            rows.append((f"stage {k}", dur[k], ""))
    t = (vals.get("timing") or {}).get("details") or {}
    for name, s in (t.get("phases_s") or {}).items():
        rows.append((f"  timing: {name}", float(s), ""))
    if t:
        att = t.get("attempts") or []
        rows.append(("  timing: pairs (attempts)", None,
                     f"{t.get('pairs')} pairs, {len(att)} attempt(s), {t.get('speedup', {}).get('ratio', 0):.3f}x "
                     f"[{t.get('speedup', {}).get('low', 0):.3f}, {t.get('speedup', {}).get('high', 0):.3f}], "
                     f"{(t.get('stability') or {}).get('verdict')}"))
    rows.append(("judge after the worker", after, f"its work {judge.get('work_s', 0) or 0:.1f} s in all"))
    rows.append(("roofline (parent)", dur.get("roofline"), ""))
    base = (ev.get("baseline") or {}).get("cost_s") or {}
    for what, c in base.items():
        rows.append((f"baselines beside ({what})", sum(float(x) for x in c.values()) if isinstance(c, dict) else None,
                     json.dumps(c)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kernelbench", type=Path, help="KernelBench's folder (holding level1/...)")
    ap.add_argument("--problem", default="level1/19_ReLU", help="a problem under --kernelbench")
    ap.add_argument("--problem-file", type=Path, help="a problem file or command problem's folder")
    ap.add_argument("--candidate", type=Path)
    ap.add_argument("--config", type=Path)
    ap.add_argument("--repeat", type=int, default=2, help="evaluations in a row (the first is the cold one)")
    ap.add_argument("--probes", type=int, default=3, help="fresh processes per fixed-cost probe")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="eval_cost_"))
    if a.kernelbench is not None:
        root = a.kernelbench / "KernelBench" if (a.kernelbench / "KernelBench").is_dir() else a.kernelbench
        problem = root / f"{a.problem}.py"
        if not problem.exists():
            raise SystemExit(f"--problem {a.problem}: no {problem}")
        candidate = a.candidate
        if candidate is None:
            candidate = tmp / "honest.py"
            candidate.write_text(honest(problem.read_text()))
    else:
        problem = a.problem_file or ROOT / "examples/01_elementwise/problem.py"
        candidate = a.candidate or ROOT / "examples/01_elementwise/candidates/torch_rewrite.py"
    print(f"problem {problem}\ncandidate {candidate}\ndevice {a.device}", flush=True)
    fixed = fixed_costs(a.device, a.probes)
    runs = []
    for i in range(a.repeat):
        ev = one_eval(problem, candidate, a.device, a.config)
        runs.append(breakdown(ev, fixed))
        print(f"evaluation {i + 1}: {ev.get('status')} in {ev['_outside_wall_s']:.1f} s", flush=True)
    names = [r[0] for r in runs[0]]
    head = "| what | " + " | ".join(f"run {i + 1} s" for i in range(len(runs))) + " | note |"
    print("\n" + head + "\n|" + "---|" * (len(runs) + 2))
    for j, name in enumerate(names):
        cells = []
        for r in runs:
            v = r[j][1] if j < len(r) and r[j][0] == name else None
            cells.append("" if v is None else f"{v:.2f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {runs[-1][j][2] if j < len(runs[-1]) else ''} |")
    if a.json_out is not None:
        a.json_out.write_text(json.dumps({"fixed": fixed, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
