"""Benchmark (issue 26): AUTO's showcase problems on the command domain, measured on a GPU.

For one example (`examples/robertson`, `examples/dgemm`): every named design evaluated by the
harness (reference, hand-written designs, cheats), each printed with its verdict, its paired
speedup over the reference per case, the fraction of each harness baseline (cuBLAS) per case,
and where the evaluation's wall time went (builds, correctness, timing); then, with `--search`,
a short `auto` search whose Strategist and Implementors are a scripted model (pydantic-ai's
FunctionModel: no LLM) that proposes the example's designs in order, to show the whole path
(evaluate, rank, report) on the device.

Usage (on the GPU machine, PYTHONPATH=src plus the carried wheels):
  python benchmarks/showcase.py --example examples/robertson --designs reference,designs/tuned,designs/wrong
  python benchmarks/showcase.py --example examples/dgemm --designs designs/tiled --search designs/wrong,designs/tiled
Writes --out (JSON: every evaluation's summary) and, with --search, the run directory's report.
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

from rich.console import Console  # noqa: E402

from stratagem.config import environment, load_config  # noqa: E402
from stratagem.core.design import Design, files_text  # noqa: E402
from stratagem.domains import load_problem  # noqa: E402
from stratagem.evaluation.executors import make_executor  # noqa: E402
from stratagem.evaluation.service import Evaluator  # noqa: E402
from stratagem.report.cases import print_cases  # noqa: E402


def design_files(example: Path, rel: str) -> dict[str, str]:
    d = example / rel
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file() and not p.name.startswith(".")}


def evaluate_all(example: Path, designs: list[str], device: str, console: Console) -> list[dict[str, Any]]:
    cfg = load_config(None, {"evaluation": {"device": device, "workers_per_gpu": 1}}).evaluation
    problem = load_problem(example)
    ex = make_executor(cfg, environment())
    evaluator = Evaluator(cfg, ex)
    out = []
    for rel in designs:
        t0 = time.monotonic()
        ev = asyncio.run(evaluator.evaluate(problem, Design(files=design_files(example, rel)), with_baseline=False))
        wall = time.monotonic() - t0
        s = ev.summary()
        stages = {k: round(v["duration_s"] or 0.0, 1) for k, v in s["validators"].items()}
        build = (s["validators"].get("build") or {}).get("details") or {}
        builds = {k.removesuffix("_build_s"): v for k, v in build.items() if k.endswith("_build_s")}
        failure = "; ".join(f"{f['validator']}: {f['kind']}: {f['reason']}" for f in s["failures"])[:400]
        sp = s["speedup"]
        console.print(f"[bold]{rel}[/]: {s['status']} · speedup {sp if sp is None else f'{sp:.3g}x'} "
                      f"{s['speedup_ci'] or ''} · wall {wall:.1f} s · stages {stages} · builds {builds}"
                      + (f" · {failure}" if failure else ""), highlight=False)
        timing = (s["validators"].get("timing") or {}).get("details") or {}
        if timing.get("cases"):
            print_cases(console, timing, f"{rel} per case")
        out.append({"design": rel, "wall_s": wall, "stages_s": stages, "builds_s": builds, "summary": s})
    return out


def scripted_search(example: Path, designs: list[str], device: str, runs_dir: Path, console: Console) -> dict[str, Any]:
    """A short `auto` search whose model proposes `designs` in order (one per Implementor call)."""
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from stratagem.report.html import write_report
    from stratagem.search.loop import SearchLoop
    from stratagem.search.policies.auto import AutoPolicy
    from stratagem.search.policies.registry import resolved_config
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    texts = [files_text(design_files(example, rel)) for rel in designs]
    calls = {"n": 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        system = str(getattr(messages[-1], "instructions", None) or "")
        if info.output_tools:
            tool = info.output_tools[0].name
            if system.startswith("You are the Strategist"):
                args = {"strategy": "innovate", "evidence": [], "rationale": "scripted",
                        "instructions": "propose the next hand-written design", "variants": []}
            elif system.startswith("You are an Implementor"):
                args = {"source": texts[min(calls["n"], len(texts) - 1)], "notes": "scripted"}
                calls["n"] += 1
            else:
                args = {"cheating": False, "reason": "scripted review"}
            return ModelResponse(parts=[ToolCallPart(tool, json.dumps(args))])
        return ModelResponse(parts=[TextPart("scripted")])

    over = {"search": {"policy": "auto", "iterations": len(texts), "implementors": 1, "patience": 10,
                       "confirm_top": 0},
            "agents": {"model": "test"}, "evaluation": {"device": device, "workers_per_gpu": 1}}
    cfg = resolved_config(load_config(None, over))
    problem = load_problem(example)
    run_dir = runs_dir / f"{problem.name}-scripted"
    store = RunStore.open(run_dir)
    store.add_problem(problem)
    store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
    pol = AutoPolicy.from_config(cfg, problem, run_dir / "work", models={"default": FunctionModel(model)})
    ev = Evaluator(cfg.evaluation, make_executor(cfg.evaluation, environment()))
    t0 = time.monotonic()
    asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, pol)).run())  # type: ignore[arg-type]
    wall = time.monotonic() - t0
    from stratagem.search import state as st

    views = st.stored_views(store)
    store.close()
    try:
        report: Any = write_report(run_dir, analyses=False)
    except Exception as e:  # noqa: BLE001 - matplotlib may be missing on the device: the search still counts
        report = f"not written: {type(e).__name__}: {e}"
    rows = [{"design": v.id[:12], "status": v.status, "speedup": v.speedup_text()} for v in views]
    for r in rows:
        console.print(r, highlight=False)
    console.print(f"search: {len(views)} designs in {wall:.0f} s; report {report}", highlight=False)
    return {"wall_s": wall, "designs": rows, "run_dir": str(run_dir), "report": str(report)}


def tune_search(example: Path, template: Path, iterations: int, device: str, runs_dir: Path,
                console: Console) -> dict[str, Any]:
    """`--policy tune` on the example (issue 27's GPU benchmark): the points tried with their
    status and speedup, the best point's per-case figures, evaluations spent and wall time."""
    from stratagem.report.cases import latest_timing
    from stratagem.search import state as st
    from stratagem.search.loop import SearchLoop
    from stratagem.search.policies.registry import TuneSettings, resolved_config
    from stratagem.search.policies.tune import TAG_PARAMS, TunePolicy, point_text
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    run_dir = runs_dir / f"{example.name}-tune-{time.strftime('%Y%m%d-%H%M%S')}"
    problem = load_problem(example)
    cfg = resolved_config(load_config(None, {
        "evaluation": {"device": device, "workers_per_gpu": 1},
        "search": {"policy": "tune", "iterations": iterations, "confirm_top": 0, "run_dir": str(run_dir)},
        "policies": {"tune": {"design": str(template.resolve())}}}), problem)
    policy = TunePolicy.from_settings(TuneSettings.model_validate(cfg.policies["tune"]), problem, cfg.search.seed)
    store = RunStore.open(run_dir)
    store.add_problem(problem)
    store.start_run(problem.id, "tune", cfg.model_dump(mode="json"))
    ev = Evaluator(cfg.evaluation, make_executor(cfg.evaluation, environment()))
    t0 = time.monotonic()
    out = asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, policy)).run())  # type: ignore[arg-type]
    wall = time.monotonic() - t0
    views = sorted(st.stored_views(store), key=lambda v: v.created_at)
    points = [{"design": v.id[:12], "params": v.tags.get(TAG_PARAMS), "status": v.status, "speedup": v.speedup}
              for v in views if v.tags.get(TAG_PARAMS)]
    for i, p in enumerate(points, 1):
        sp = p["speedup"]
        console.print(f"{i:3d}. {point_text(p['params'])}: {p['status']}{'' if sp is None else f' {sp:.3g}x'}",
                      highlight=False)
    measured = [v for v in views if v.tags.get(TAG_PARAMS) and v.status in ("valid", "unstable") and v.speedup]
    best = max(measured, key=lambda v: v.speedup or 0.0, default=None)
    if best is not None:
        timing = latest_timing(store.evaluations(best.id))
        console.print(f"best point: {point_text(best.tags[TAG_PARAMS])} ({best.status}, {best.speedup_text()})",
                      highlight=False)
        if timing:
            print_cases(console, timing, f"best point {best.id[:12]} per case")
    evaluations = len(store.evaluations())
    store.close()
    console.print(f"tune: {len(points)} points, {evaluations} evaluations (re-timings of a new best included) in "
                  f"{wall:.0f} s; stop: {out.stop_reason}; run {run_dir}", highlight=False)
    return {"wall_s": wall, "points": points, "evaluations": evaluations, "run_dir": str(run_dir),
            "best": None if best is None else {"design": best.id[:12], "params": best.tags[TAG_PARAMS],
                                               "speedup": best.speedup}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", required=True)
    ap.add_argument("--designs", default="reference", help="comma-separated folders, relative to the example")
    ap.add_argument("--search", default=None, help="comma-separated designs a scripted model proposes in order")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs-dir", default=str(ROOT / "runs" / "showcase"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--tune", metavar="DESIGN_DIR", default=None,
                    help="a templated design (relative to the example) to tune with --policy tune (docs/tune.md)")
    ap.add_argument("--tune-iterations", metavar="N", type=int, default=12, help="the tune study's evaluation budget")
    args = ap.parse_args()
    console = Console(width=160)
    example = Path(args.example)
    result: dict[str, Any] = {"example": str(example), "device": args.device, "date": time.strftime("%Y-%m-%d")}
    if args.designs:
        result["evaluations"] = evaluate_all(example, args.designs.split(","), args.device, console)
    if args.search:
        result["search"] = scripted_search(example, args.search.split(","), args.device, Path(args.runs_dir), console)
    if args.tune:
        result["tune"] = tune_search(example, example / args.tune, args.tune_iterations, args.device,
                                     Path(args.runs_dir), console)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
