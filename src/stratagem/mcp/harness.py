"""Owns what the MCP tools do with the harness and the run databases: evaluate a candidate,
time the baselines, list and show runs, show and export a design.

Each function takes checked arguments (`inputs`), returns a record (`records`) and raises
only `ToolInputError` or stratagem's own errors, which the server turns into failure
records. Evaluations report each stage through `on_stage` (the server's progress
notifications). Reading a run never writes into it (`RunStore.read`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratagem.mcp import inputs
from stratagem.mcp.inputs import ToolInputError
from stratagem.mcp.records import (
    BaselineResult,
    DesignResult,
    EvaluateResult,
    ExportResult,
    RunEntry,
    ShowRunResult,
)

OnStage = Callable[[str], None]


def eval_overrides(device: str | None, timeout_s: float | None = None, integrity: str | None = None,
                   correctness: str | None = None) -> dict[str, Any]:
    """The evaluation options as `stratagem eval`'s command line gives them."""
    return {"evaluation": {"device": device, "timeout_s": inputs.positive("timeout_s", timeout_s),
                           "integrity": integrity, "correctness": {"mode": correctness}}}


async def evaluate(problem: str, candidate: str | None, files: dict[str, str] | None, *, device: str | None,
                   timeout_s: float | None, integrity: str | None, correctness: str | None,
                   run_dir: str | None, config: str | None, on_stage: OnStage) -> EvaluateResult:
    """`stratagem eval PROBLEM CANDIDATE` as a tool: the same harness, the same verdict."""
    from stratagem.domains import load_problem
    from stratagem.evaluation.api import make_evaluator, record

    cfg = inputs.config(config, eval_overrides(device, timeout_s, integrity, correctness))
    prob = _problem(load_problem, problem)
    design = inputs.candidate_design(candidate, files, prob)
    where = inputs.run_dir_path(run_dir, must_exist=False) if run_dir is not None else None
    evaluator = make_evaluator(cfg.evaluation)
    try:
        ev = await evaluator.evaluate(prob, design, on_stage=on_stage)
    finally:
        await evaluator.executor.aclose()
    if where is not None:
        record(where, ev)
    summary = json.loads(json.dumps(ev.summary(), default=str))
    return EvaluateResult(status=summary["status"], verdict=summary, recorded_in=str(where) if where else None)


async def baseline(problem: str, *, refresh: bool, device: str | None, config: str | None) -> BaselineResult:
    """`stratagem baseline PROBLEM` as a tool (from the cache unless `refresh`)."""
    from stratagem.domains import load_problem
    from stratagem.evaluation.api import make_evaluator
    from stratagem.report.evaluation import baseline_json

    cfg = inputs.config(config, eval_overrides(device))
    prob = _problem(load_problem, problem)
    evaluator = make_evaluator(cfg.evaluation)
    try:
        base = await evaluator.baseline(prob, refresh=refresh)
    finally:
        await evaluator.executor.aclose()
    out = json.loads(json.dumps(baseline_json(prob, base), default=str))
    if not base.modes and not base.verdict.results:
        out["status"] = "not_measured"
        out["note"] = (f"the {prob.domain} domain keeps no separate baselines: it times its reference beside "
                       "each design (see evaluate's speedup)")
    return BaselineResult(baseline=out)


def _problem(load: Callable[[Path], Any], value: str) -> Any:
    from stratagem.errors import ProblemError

    path = inputs.problem_path(value)
    try:
        return load(path)
    except ProblemError as e:
        raise ToolInputError("problem", f"problem: {e}") from e


def show_run(run_dir: str) -> ShowRunResult:
    """What `stratagem show RUN_DIR --json` prints (docs/show-json.md)."""
    return ShowRunResult(run=show_json(inputs.run_dir_path(run_dir)))


def show_json(where: Path) -> dict[str, Any]:
    """The run's record, as `stratagem show --json` prints it (`report/run_json.py`)."""
    from stratagem.errors import StoreError
    from stratagem.report.run_json import run_json
    from stratagem.search.api import show_run as read

    try:
        return run_json(read(where))
    except StoreError as e:
        if "holds no run database" in str(e):
            raise ToolInputError("run_dir", f"run_dir: {e}", kind="not_found") from e
        raise


def run_entry(where: Path) -> RunEntry:
    """A run's line in `list_runs`, from its database."""
    from stratagem.search.api import show_run as read
    from stratagem.search.numbers import counts

    r = read(where)
    head = r.headline  # the run's result as every view says it
    c = counts(r.views)
    return RunEntry(run_dir=str(where), problem=r.problem, domain=r.domain,
                    policy=r.run.policy if r.run else None, status=r.run.status if r.run else None,
                    stop_reason=r.run.stop_reason if r.run else None, iterations=len(r.iterations),
                    designs=len(r.views), valid=c.valid,
                    best_speedup=head.ratios.reference.ratio if head.ratios is not None else None,
                    best_confirmed=head.confirmed, headline=" ".join(head.lines()))


def find_runs(root: str, limit: int) -> list[Path]:
    """Run directories under `root` (it, its children and grandchildren: a suite's runs),
    newest first."""
    from stratagem.store.sqlite import RunStore

    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise ToolInputError("root", f"root: {base} is not a directory (runs are made under ./runs by default)",
                             kind="not_found")
    found = [p.parent for pat in (RunStore.DB_NAME, f"*/{RunStore.DB_NAME}", f"*/*/{RunStore.DB_NAME}")
             for p in base.glob(pat)]
    found.sort(key=lambda p: (p / RunStore.DB_NAME).stat().st_mtime, reverse=True)
    return found[:limit]


def show_design(run_dir: str, design: str | None) -> DesignResult:
    """One design of a run (an id prefix; the best when None): its files and its entry of
    `show --json`'s `all_designs` (numbers, lineage, and why it failed)."""
    from stratagem.store.sqlite import RunStore

    where = inputs.run_dir_path(run_dir)
    shown = show_json(where)
    entry = _pick(shown, design)
    with RunStore.read(where) as store:
        rec = store.design(entry["id"])
        files = {} if rec is None else {name: store.get_artifact(h) for name, h in rec.files.items()}
    return DesignResult(design=entry, files=files)


def _pick(shown: dict[str, Any], prefix: str | None) -> dict[str, Any]:
    designs: list[dict[str, Any]] = shown.get("all_designs") or []
    if prefix is None:
        best = shown.get("best")
        if not best:
            raise ToolInputError("design", "design: the run has no valid design yet; name one by its id "
                                           "(show_run lists them)", kind="not_found")
        prefix = str(best["id"])
    if not prefix.strip():
        raise ToolInputError("design", "design: give a design id (a prefix is enough), or leave it out for the best")
    hits = [d for d in designs if str(d.get("id", "")).startswith(prefix)]
    if not hits:
        raise ToolInputError("design", f"design: no design of this run has an id starting with {prefix!r} "
                                       "(show_run lists them)", kind="not_found")
    if len(hits) > 1:
        raise ToolInputError("design", f"design: {len(hits)} designs start with {prefix!r}: give more of the id")
    return hits[0]


def export_design(run_dir: str, design: str | None, out: str | None) -> ExportResult:
    """`stratagem export RUN_DIR [DESIGN] [--out FILE]` as a tool."""
    from stratagem.errors import StoreError
    from stratagem.search.api import show_run as read
    from stratagem.search.export import exported_source, pick

    where = inputs.run_dir_path(run_dir)
    r = read(where)
    try:
        view = pick(r.views, design, r.best)
    except StoreError as e:
        raise ToolInputError("design", f"design: {e}", kind="not_found") from e
    text = exported_source(view, r.problem, r.run_dir, r.device, r.reference_ms or None, r.domain, r.main_file)
    path = None
    if out is not None:
        p = Path(out).expanduser().resolve()
        if p.is_dir():
            raise ToolInputError("out", f"out: {p} is a directory; give a file path")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        except OSError as e:
            raise ToolInputError("out", f"out: cannot write {p}: {e}") from e
        path = str(p)
    return ExportResult(design_id=view.id, text=text, path=path)
