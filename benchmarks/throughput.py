"""Benchmark: issue 60's targets ("Evaluations per minute") in one command, within a time budget.

Parts, in this order (each skippable with --skip, each given at most what is left of
--max-seconds; a part that cannot start in what is left is reported as skipped):
  relu     `stratagem eval` of an honest ReLU (KernelBench level1/19_ReLU as shipped): cold (a
           fresh cache folder: no baselines, peaks or builds) then warm (the same folder again);
           the stream, the command problems and recipes then use that folder (warm, as a search's
           designs after its first), the load_inline part a fresh one
  stream   20 designs of that problem submitted as four Implementors would (four writers, each
           submitting its next design when its last was judged), in one process with the
           executor's spare workers (`[evaluation] spare_workers`); designs proven per minute
           (--stream-compare: the same stream again without spares first)
  inline   a `load_inline` CUDA ReLU's first evaluation on a fresh cache (GPU only)
  commands Robertson's and DGEMM's evaluation (examples/robertson, examples/dgemm; GPU), wall
  recipes  `stratagem run` with `--policy recipes` on one level-1 problem, including its
           confirmation round, wall
It prints one table and writes every figure to --json-out.

The command for one device call on an H100 (about 8 minutes; KernelBench as shipped):
  python benchmarks/throughput.py --device cuda --kernelbench /path/to/KernelBench --max-seconds 480 \
      --json-out $OUT/throughput.json
(run it with the device call's limit at 600 s; what does not fit in 480 s is reported as skipped:
`--skip inline,commands` leaves recipes room, `--stream-compare` adds the stream without spares)

On the CPU (tiny bundled problems: examples/01_elementwise, examples/command/window_sums; a
config with short timings keeps it to minutes):
  python benchmarks/throughput.py --device cpu --max-seconds 600 --config FAST.toml --designs 8 --stream-compare
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

PARTS = ("relu", "stream", "inline", "commands", "recipes")
TARGETS = {"relu_warm_s": "<= 4", "relu_cold_s": "<= 15", "inline_first_s": "<= 45", "stream_per_min": ">= 15",
           "recipes_wall_s": "<= 90 (level 1)", "robertson_s": "<= 25", "dgemm_s": "<= 25",
           "window_sums_s": "(the CPU check's command problem)"}
NEEDS = {"relu": 60.0, "stream": 60.0, "inline": 60.0, "commands": 60.0, "recipes": 90.0}
"""Seconds a part needs at least to be worth starting."""
CONFIG: list[str] = []
"""`--config FILE`, given to every command and the stream."""


def honest(source: str) -> str:
    """The problem's own Model as ModelNew: what an honest candidate computes, unchanged."""
    out = re.sub(r"\bclass Model\b", "class ModelNew", source)
    return re.sub(r"super\(\s*Model\s*,", "super(ModelNew,", out)


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["STRATAGEM_CACHE_DIR"] = str(cache)
    return env


def cli(args: list[str], cache: Path, timeout_s: float) -> dict[str, Any]:
    """`stratagem ARGS --json` in a fresh process under cache folder `cache`: its JSON body
    with `_wall_s` (outside wall) and `_exit`; `_error` when it printed none or ran out of time."""
    t = time.perf_counter()
    if CONFIG:
        args = [*args, "--config", CONFIG[0]]
    try:
        run = subprocess.run([sys.executable, "-m", "stratagem", *args, "--json"], env=_env(cache),
                             capture_output=True, text=True, timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        return {"_wall_s": time.perf_counter() - t, "_error": f"over its {timeout_s:.0f} s budget"}
    wall = time.perf_counter() - t
    try:
        body = json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"_wall_s": wall, "_exit": run.returncode, "_error": (run.stderr or run.stdout)[-1500:]}
    return {**(body if isinstance(body, dict) else {"body": body}), "_wall_s": wall, "_exit": run.returncode}


def _status(body: dict[str, Any]) -> str:
    return str(body.get("_error") or body.get("status") or f"exit {body.get('_exit')}")[:200]


def part_relu(a: argparse.Namespace, tmp: Path, left: float) -> dict[str, Any]:
    cache = tmp / "cache-relu"
    cold = cli(["eval", str(a.problem_path), str(a.candidate_path), "--device", a.device], cache, left)
    warm = cli(["eval", str(a.problem_path), str(a.candidate_path), "--device", a.device], cache,
               left - cold["_wall_s"])
    return {"relu_cold_s": round(cold["_wall_s"], 2), "relu_warm_s": round(warm["_wall_s"], 2),
            "cold_status": _status(cold), "warm_status": _status(warm)}


def part_inline(a: argparse.Namespace, tmp: Path, left: float) -> dict[str, Any]:
    if a.device == "cpu":
        return {"skipped": "a load_inline CUDA design needs a GPU"}
    body = cli(["eval", str(a.problem_path), str(ROOT / "tests/gpu/strict/cuda_honest.py"), "--device", a.device],
               tmp / "cache-inline", left)
    vals = body.get("validators") or {}
    return {"inline_first_s": round(body["_wall_s"], 2), "status": _status(body),
            "stages_s": {k: v.get("duration_s") for k, v in vals.items() if isinstance(v, dict)}}


async def _stream(a: argparse.Namespace, cache: Path, spares: bool, left: float) -> dict[str, Any]:
    from stratagem.config import load_config
    from stratagem.domains import load_problem
    from stratagem.evaluation.api import make_evaluator, read_design
    from stratagem.evaluation.executors import LocalExecutor

    os.environ["STRATAGEM_CACHE_DIR"] = str(cache)
    cfg = load_config(a.config, {"evaluation": {"device": a.device, "spare_workers": "always" if spares else "never"}}).evaluation
    ev = make_evaluator(cfg)
    problem = load_problem(a.problem_path)
    source = a.candidate_path.read_text()
    folder = cache / "designs"
    folder.mkdir(parents=True, exist_ok=True)
    designs = []
    for i in range(a.designs):  # distinct designs (a search never evaluates one text twice)
        p = folder / f"design_{i}.py"
        p.write_text(f"{source}\n# stream design {i} ({time.time_ns()})\n")
        designs.append(read_design(p, problem))
    verdicts: list[str] = []
    try:
        async with asyncio.timeout(left):
            t0 = time.monotonic()
            baseline = await ev.baseline(problem)  # once per problem, before its designs, as a search does
            baseline_s = time.monotonic() - t0
            t1 = time.monotonic()

            async def writer(k: int) -> None:
                for i in range(k, len(designs), a.writers):
                    verdicts.append((await ev.evaluate(problem, designs[i], baseline=baseline)).verdict.status)

            await asyncio.gather(*(writer(k) for k in range(a.writers)))
            wall = time.monotonic() - t1
    except TimeoutError:
        return {"spares": spares, "_error": f"over its {left:.0f} s budget", "judged": len(verdicts)}
    finally:
        served = ev.executor.spares.served if isinstance(ev.executor, LocalExecutor) else 0
        await ev.executor.aclose()
    valid = sum(1 for v in verdicts if v == "valid")
    return {"spares": spares, "designs": len(designs), "writers": a.writers, "valid": valid,
            "verdicts": sorted(set(verdicts)), "baseline_s": round(baseline_s, 2), "wall_s": round(wall, 2),
            "stream_per_min": round(valid / wall * 60, 2), "served_by_spares": served}


def part_stream(a: argparse.Namespace, tmp: Path, left: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    if a.stream_compare:
        out["without_spares"] = asyncio.run(_stream(a, tmp / "cache-relu", False, left / 2))
    out.update(asyncio.run(_stream(a, tmp / "cache-relu", True, left - (time.monotonic() - t0))))
    return out


def part_commands(a: argparse.Namespace, tmp: Path, left: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.device == "cpu":
        pairs = [("window_sums_s", ROOT / "examples/command/window_sums", "fast")]
    else:
        pairs = [("robertson_s", ROOT / "examples/robertson", a.robertson_design),
                 ("dgemm_s", ROOT / "examples/dgemm", a.dgemm_design)]
    t0 = time.monotonic()
    for key, problem, design in pairs:
        body = cli(["eval", str(problem), str(problem / "designs" / design), "--device", a.device], tmp / "cache-cmd",
                   left - (time.monotonic() - t0))
        out[key] = round(body["_wall_s"], 2)
        out[key[:-2] + "_status"] = _status(body)
    return out


def part_recipes(a: argparse.Namespace, tmp: Path, left: float) -> dict[str, Any]:
    problem = a.recipes_path
    body = cli(["run", str(problem), "--policy", "recipes", "--device", a.device, "--run-dir", str(tmp / "run-recipes")],
               tmp / "cache-relu", left)
    shown = cli(["show", str(tmp / "run-recipes")], tmp / "cache-relu", 60.0)  # the run's round
    conf = shown.get("confirmation") or {}
    return {"recipes_wall_s": round(body["_wall_s"], 2), "status": _status(body) if "_error" in body else "done",
            "confirm_blocks": conf.get("blocks"), "confirm_stop": conf.get("stop"),
            "confirm_wall_s": conf.get("wall_s"), "exit": body.get("_exit")}


RUNNERS: dict[str, Callable[[argparse.Namespace, Path, float], dict[str, Any]]] = {
    "relu": part_relu, "stream": part_stream, "inline": part_inline, "commands": part_commands, "recipes": part_recipes}


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kernelbench", type=Path, help="KernelBench's folder (holding level1/...)")
    ap.add_argument("--problem", default="level1/19_ReLU", help="the problem under --kernelbench (relu, stream, inline)")
    ap.add_argument("--problem-file", type=Path, help="without --kernelbench: the problem file (default the bundled "
                    "examples/01_elementwise)")
    ap.add_argument("--candidate", type=Path, help="with --problem-file: its honest design")
    ap.add_argument("--recipes-problem", default=None, help="the problem under --kernelbench for recipes (default --problem)")
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    ap.add_argument("--max-seconds", type=float, default=480.0, help="the whole budget; parts that do not fit are skipped")
    ap.add_argument("--designs", type=int, default=20)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--stream-compare", action="store_true", help="run the stream without spare workers first")
    ap.add_argument("--robertson-design", default="tuned")
    ap.add_argument("--dgemm-design", default="tiled")
    ap.add_argument("--config", type=str, default=None, help="a TOML config for every part (a CPU check: short timings)")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    CONFIG[:] = [a.config] if a.config else []
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="throughput_"))
    if a.kernelbench is not None:
        root = a.kernelbench / "KernelBench" if (a.kernelbench / "KernelBench").is_dir() else a.kernelbench
        a.problem_path = root / f"{a.problem}.py"
        a.recipes_path = root / f"{a.recipes_problem or a.problem}.py"
        for p in (a.problem_path, a.recipes_path):
            if not p.exists():
                raise SystemExit(f"no {p}")
        a.candidate_path = tmp / "honest.py"
        a.candidate_path.write_text(honest(a.problem_path.read_text()))
    else:
        a.problem_path = a.recipes_path = a.problem_file or ROOT / "examples/01_elementwise/problem.py"
        a.candidate_path = a.candidate or ROOT / "examples/01_elementwise/candidates/torch_rewrite.py"
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    if skip - set(PARTS):
        raise SystemExit(f"--skip: unknown parts {sorted(skip - set(PARTS))} (parts: {', '.join(PARTS)})")
    print(f"throughput: device {a.device}, problem {a.problem_path}, budget {a.max_seconds:.0f} s, commit {_commit()}",
          flush=True)
    results: dict[str, Any] = {}
    for name in PARTS:
        left = a.max_seconds - (time.monotonic() - t_start)
        if name in skip:
            results[name] = {"skipped": "--skip"}
        elif left < NEEDS[name]:
            results[name] = {"skipped": f"{left:.0f} s left of --max-seconds, it needs {NEEDS[name]:.0f}"}
        else:
            t = time.monotonic()
            try:
                results[name] = RUNNERS[name](a, tmp, left)
            except Exception as e:  # noqa: BLE001 - one part's failure is reported, the others run
                results[name] = {"_error": f"{type(e).__name__}: {e}"}
            results[name]["part_s"] = round(time.monotonic() - t, 2)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    print("\n| part | figure | value | target |\n|---|---|---|---|")
    for name, r in results.items():
        figures = [(k, v) for k, v in r.items() if k in TARGETS]
        for k, v in figures or [("", r.get("skipped") or r.get("_error") or "")]:
            print(f"| {name} | {k} | {v} | {TARGETS.get(k, '')} |")
    body = {"device": a.device, "commit": _commit(), "problem": str(a.problem_path), "max_seconds": a.max_seconds,
            "wall_s": round(time.monotonic() - t_start, 2), "parts": results}
    if a.json_out is not None:
        a.json_out.write_text(json.dumps(body, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
