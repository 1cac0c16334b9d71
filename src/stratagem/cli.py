"""Owns the command line: a thin typer app; every command calls a library function.

Exit codes: 0 a verdict was reached (valid or invalid) · 1 the harness or the problem failed
(status `error`) · 2 usage or configuration error (bad options, malformed problem file).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stratagem.config import DEFAULT_TIMEOUT_S, StratagemConfig, load_config
from stratagem.errors import CandidateError, ConfigError, ProblemError, StratagemError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "stratagem: search for faster GPU code with LLM agents; every candidate is proven "
        "correct, honest and fast by a sandboxed harness.\n\n"
        "A PROBLEM is a KernelBench-format .py file (class Model, get_inputs(), "
        "get_init_inputs(), size constants). A CANDIDATE is a .py file defining class "
        "ModelNew (PyTorch, CUDA via load_inline, or Triton).\n\n"
        "Config precedence: defaults < --config TOML < command-line options.\n\n"
        "Exit codes: 0 verdict reached (valid or invalid); 1 harness or problem error; "
        "2 usage or configuration error."
    ),
)

DeviceOpt = Annotated[
    str | None, typer.Option("--device", help="auto (GPU if visible, else CPU), cpu, cuda or cuda:N.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]


def _config(
    config: Path | None, device: str | None, timeout: float | None = None, integrity: str | None = None,
    correctness: str | None = None,
) -> StratagemConfig:
    return load_config(config, {"evaluation": {"device": device, "timeout_s": timeout, "integrity": integrity,
                                               "correctness": {"mode": correctness}}})


CorrectnessOpt = Annotated[
    str | None,
    typer.Option("--correctness", help="fixed (KernelBench's tolerances, the default) or calibrated (within a factor "
                                       "of eager's own error against a float64 run of the reference)."),
]


def _fail(console: Console, e: StratagemError, as_json: bool, code: int) -> None:
    if as_json:
        print(json.dumps({"status": "error", "error": str(e), "error_type": type(e).__name__}))
    else:
        console.print(f"[bold red]error:[/] {escape(str(e))}")
    raise typer.Exit(code)


@app.command("eval")
def eval_cmd(
    problem: Annotated[Path, typer.Argument(help="KernelBench-format problem file.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate file defining ModelNew.")],
    device: DeviceOpt = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help=f"Worker wall-clock limit in seconds, compile included (default {DEFAULT_TIMEOUT_S:g} s; a problem may set its own)."),
    ] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Record the evaluation in this run directory.")] = None,
    integrity: Annotated[
        str | None,
        typer.Option("--integrity", help="lenient (default: libraries and torch ops allowed) or strict (the heavy work must run in the candidate's own kernels)."),
    ] = None,
    correctness: CorrectnessOpt = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Evaluate one CANDIDATE against one PROBLEM: static checks, load, correctness,
    integrity, shapes, timing, roofline."""
    from stratagem.evaluation.api import evaluate_files

    console = Console(stderr=as_json)
    try:
        cfg = _config(config, device, timeout, integrity, correctness)
        ev = evaluate_files(problem, candidate, cfg.evaluation, run_dir=run_dir)
    except (ConfigError, ProblemError, CandidateError) as e:
        _fail(console, e, as_json, 2)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    summary = ev.summary()
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        _print_eval(console, summary)
    raise typer.Exit(1 if summary["status"] == "error" else 0)


@app.command("baseline")
def baseline_cmd(
    problem: Annotated[Path, typer.Argument(help="KernelBench-format problem file.")],
    device: DeviceOpt = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if cached.")] = False,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Time the reference PROBLEM: eager and torch.compile (plus max-autotune on a GPU)."""
    from stratagem.evaluation.api import baseline_file

    console = Console(stderr=as_json)
    try:
        cfg = _config(config, device)
        prob, base = baseline_file(problem, cfg.evaluation, refresh=refresh)
    except (ConfigError, ProblemError) as e:
        _fail(console, e, as_json, 2)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    ok = bool(base.modes)
    failures = [{"validator": r.name, "kind": r.kind, "reason": r.reason} for r in base.verdict.failures]
    out: dict[str, Any] = {
        "status": "valid" if ok else "error",
        "problem": prob.name,
        "problem_id": prob.id,
        "reference_ms": {m: base.median_ms(m) for m in base.modes},
        "vs_eager": {m: r.to_json() for m in base.modes if (r := base.vs_eager(m)) is not None},
        "unstable": {m: list(r) for m, r in base.unstable().items()},
        "fails_correctness": base.failing(),
        "baselines": {m: dict(v) for m, v in base.modes.items()},
        "cached": base.cached,
        "environment": dict(base.environment),
        "failures": failures,
    }
    if as_json:
        print(json.dumps(out, default=str))
    else:
        t = Table(title=f"baseline: {prob.name} on {base.environment.get('device_name', '?')}")
        for col in ("mode", "median ms", "IQR ms", "n", "speedup over eager (paired)", "stability"):
            t.add_column(col)
        unstable = base.unstable()
        for mode, stats in base.modes.items():
            if "median_ms" in stats:
                r = base.vs_eager(mode)
                vs = "-" if r is None or mode == "eager" else f"{r.ratio:.3g}x [{r.low:.3g}, {r.high:.3g}]"
                flag = "[yellow]unstable[/]" if mode in unstable else "stable"
                if base.fails(mode):
                    flag += " · [red]fails correctness[/]"
                t.add_row(mode, f"{stats['median_ms']:.4f}", f"{stats['iqr_ms']:.4f}", str(stats["n"]), vs, flag)
            else:
                t.add_row(mode, f"[red]{stats.get('error', 'failed')}[/]", "", "", "", "")
        console.print(t)
        for mode, reasons in unstable.items():
            console.print(f"[yellow]{mode} timing unstable[/]: " + "; ".join(reasons), markup=True, highlight=False)
        for f in failures:
            console.print(f"[red]{f['validator']}[/] {f['kind']}: {f['reason']}")
        if base.cached:
            console.print("[dim](cached; --refresh to measure again)[/]")
    raise typer.Exit(0 if ok else 1)


@app.command("calibrate")
def calibrate_cmd(
    device: DeviceOpt = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Measure the device's peaks again (memory bandwidth, matmul rates per math mode) for the
    roofline check, replacing the cached ones (kept in $STRATAGEM_CACHE_DIR/peaks/). Run it on
    an idle machine."""
    from stratagem.evaluation.api import calibrate_device

    console = Console(stderr=as_json)
    try:
        cfg = _config(config, device)
        peaks, path = calibrate_device(cfg.evaluation)
    except ConfigError as e:
        _fail(console, e, as_json, 2)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    if as_json:
        print(json.dumps({"status": "valid" if peaks else "error", "peaks": peaks, "path": str(path)}, default=str))
    elif peaks:
        rates = ", ".join(f"{k} {v:.3g} TFLOP/s" for k, v in (peaks.get("matmul_tflops") or {}).items())
        console.print(f"bandwidth {peaks.get('bandwidth_gbps', 0):.1f} GB/s · matmul {rates}")
        console.print(f"written to {path}")
    else:
        console.print("[red]the calibration failed[/]")
    raise typer.Exit(0 if peaks else 1)


@app.command("audit")
def audit_cmd(
    problem: Annotated[Path, typer.Argument(help="KernelBench-format problem file.")],
    device: DeviceOpt = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Check PROBLEM for null models (zeros, a constant, an input copy, half precision, a
    subsample) that pass its correctness check, and whether its output depends on the seed."""
    from stratagem.evaluation.api import audit_file

    console = Console(stderr=as_json)
    try:
        cfg = _config(config, device)
        prob, verdict, env = audit_file(problem, cfg.evaluation)
    except (ConfigError, ProblemError) as e:
        _fail(console, e, as_json, 2)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    r = verdict.result("audit")
    ok = r is not None and r.outcome == "passed"
    d = dict(r.details) if ok and r is not None else {}
    out: dict[str, Any] = {
        "status": "valid" if ok else "error",
        "problem": prob.name,
        "problem_id": prob.id,
        "cheatable": bool(d.get("passing_nulls")) or not d.get("seed_dependent", True),
        "passing_nulls": d.get("passing_nulls", []),
        "seed_dependent": d.get("seed_dependent"),
        "nulls": d.get("nulls", {}),
        "output": d.get("output", {}),
        "environment": env,
        "failures": [{"validator": f.name, "kind": f.kind, "reason": f.reason} for f in verdict.failures],
    }
    if as_json:
        print(json.dumps(out, default=str))
    elif ok:
        t = Table(title=f"audit: {prob.name} on {env.get('device_name', '?')}")
        t.add_column("null model")
        t.add_column("passes correctness?")
        t.add_column("max abs err")
        for name, rows in out["nulls"].items():
            passes = all(x["passes"] for x in rows)
            errs = [x.get("max_abs_err") for x in rows if x.get("max_abs_err") is not None]
            t.add_row(name, "[red]YES[/]" if passes else "[green]no[/]", f"{max(errs):.3g}" if errs else "-")
        console.print(t)
        console.print(f"output depends on the seed: {'yes' if out['seed_dependent'] else '[red]NO[/]'}")
        verdict_line = "[red]can be cheated by construction[/]" if out["cheatable"] else "[green]no null model passes[/]"
        console.print(f"{prob.name}: {verdict_line}")
    else:
        for f in out["failures"]:
            console.print(f"[red]{f['validator']}[/] {f['kind']}: {f['reason']}")
    raise typer.Exit(0 if ok else 1)


_COLORS = {"passed": "green", "failed": "red", "skipped": "yellow"}



@app.command("run")
def run_cmd(
    problem: Annotated[Path, typer.Argument(help="KernelBench-format problem file.")],
    model: Annotated[str | None, typer.Option("--model", help="LLM: openai:NAME, anthropic:NAME, ollama:NAME, test (pydantic-ai's TestModel), or a model name served at --endpoint. None: the recipes policy.")] = None,
    endpoint: Annotated[list[str] | None, typer.Option("--endpoint", help="OpenAI-compatible base URL serving --model (repeat for a pool).")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="auto (LLM agents) or recipes (no LLM). Default: auto with a model, else recipes.")] = None,
    iterations: Annotated[int | None, typer.Option("--iterations", help="Iterations (default 10).")] = None,
    patience: Annotated[int | None, typer.Option("--patience", help="Stop after K iterations without a new best (default 3).")] = None,
    implementors: Annotated[int | None, typer.Option("--implementors", help="Concurrent Implementors (default 2).")] = None,
    max_queries: Annotated[int | None, typer.Option("--max-queries", help="LLM request budget.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="LLM token budget.")] = None,
    max_usd: Annotated[float | None, typer.Option("--max-usd", help="Money budget (USD).")] = None,
    max_gpu_seconds: Annotated[float | None, typer.Option("--max-gpu-seconds", help="Evaluation-time budget (s).")] = None,
    max_wall_seconds: Annotated[float | None, typer.Option("--max-wall-seconds", help="Wall-clock budget of this invocation (s).")] = None,
    device: DeviceOpt = None,
    integrity: Annotated[str | None, typer.Option("--integrity", help="lenient or strict.")] = None,
    correctness: CorrectnessOpt = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Run directory (default runs/PROBLEM-TIMESTAMP).")] = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Search for a faster ModelNew for PROBLEM: iterations of a policy, every design proven by
    the harness and kept in the run directory's database. Ctrl-C stops cleanly; `stratagem
    resume RUN_DIR` continues."""
    overrides = {
        "evaluation": {"device": device, "integrity": integrity, "correctness": {"mode": correctness}},
        "search": {"policy": policy, "iterations": iterations, "patience": patience,
                   "implementors": implementors, "max_queries": max_queries, "max_tokens": max_tokens,
                   "max_usd": max_usd, "max_gpu_seconds": max_gpu_seconds,
                   "max_wall_seconds": max_wall_seconds, "run_dir": run_dir},
        "agents": {"model": model, "endpoints": endpoint or None},
    }
    console = _wide_console(stderr=as_json)
    try:
        cfg = load_config(config, overrides)
    except ConfigError as e:
        _fail(console, e, as_json, 2)
    from stratagem.search.api import start_run

    _drive(console, as_json, lambda view: start_run(problem, cfg, None, view))


@app.command("resume")
def resume_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory from `stratagem run`.")],
    iterations: Annotated[int | None, typer.Option("--iterations", help="Raise the iteration limit.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Continue a stopped or killed run from its database, with the settings it started with."""
    from stratagem.search.api import resume_run

    console = _wide_console(stderr=as_json)
    over = {"search": {"iterations": iterations}}
    _drive(console, as_json, lambda view: resume_run(run_dir, view, over))


@app.command("show")
def show_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    as_json: JsonOpt = False,
) -> None:
    """Print a run's leaderboard, iterations, strategy counts and spend."""
    from stratagem.report.leaderboard import (
        iterations_table,
        leaderboard,
        spend_line,
        strategy_table,
    )
    from stratagem.search.api import show_run

    console = _wide_console()
    try:
        r = show_run(run_dir)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    best = r.best
    if as_json:
        print(json.dumps({
            "run_dir": str(r.run_dir), "problem": r.problem,
            "status": r.run.status if r.run else None, "stop_reason": r.run.stop_reason if r.run else None,
            "iterations": len(r.iterations), "designs": len(r.views),
            "valid": sum(v.status == "valid" for v in r.views),
            "unstable": sum(v.status == "unstable" for v in r.views),
            "best": None if best is None else _design_json(best),
            "beats_reference": bool(best is not None and best.beats_reference),
            "reference_ms": r.reference_ms, "strategies": r.strategy_counts,
            "spend": r.spend.to_json(),
        }))
        return
    status = f"{r.run.status} ({r.run.stop_reason})" if r.run and r.run.stop_reason else (r.run.status if r.run else "-")
    console.print(f"[bold]{r.problem}[/] · {r.run_dir} · {status} · {len(r.iterations)} iterations · "
                  f"{len(r.views)} designs")
    console.print(leaderboard(r.views, r.reference_ms))
    console.print(iterations_table(r.iterations, r.views))
    console.print(strategy_table(r.strategy_counts))
    console.print(spend_line(r.spend))


def _design_json(v: Any) -> dict[str, Any]:
    """One design's numbers as `show --json` and `run --json` give them."""
    return {"id": v.id, "status": v.status, "runtime_ms": v.runtime_ms, "speedup": v.speedup,
            "speedup_ci": None if v.speedup_low is None else [v.speedup_low, v.speedup_high],
            "speedup_compile": v.speedup_compile, "compile_fails": v.compile_fails or None,
            "beats_reference": v.beats_reference,
            "stability": v.stability or "stable"}


def _wide_console(stderr: bool = False) -> Console:
    """A console that does not fold tables to 80 columns when writing to a file or pipe."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=120)


def _drive(console: Console, as_json: bool, start: Any) -> None:
    """Run a search coroutine with the live view; Ctrl-C stops it cleanly (exit 130)."""
    import asyncio

    from stratagem.report.leaderboard import leaderboard, spend_line, strategy_table
    from stratagem.report.live import LiveView
    from stratagem.search import state as st

    try:
        with LiveView(console) as view:
            outcome = asyncio.run(start(None if as_json else view))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: everything so far is saved; continue with `stratagem resume RUN_DIR`")
        raise typer.Exit(130) from None
    except (ConfigError, ProblemError) as e:
        _fail(console, e, as_json, 2)
    except StratagemError as e:
        _fail(console, e, as_json, 1)
    best = outcome.best
    if as_json:
        print(json.dumps({
            "run_dir": str(outcome.run_dir), "stop_reason": outcome.stop_reason,
            "iterations": outcome.iterations,
            "best": None if best is None else {**_design_json(best), "path": str(outcome.best_path)},
            "no_gain": outcome.no_gain,
            "best_path": str(outcome.best_path) if outcome.best_path else None,
            "fastest": None if outcome.top is None else _design_json(outcome.top),
            "reference_ms": outcome.reference_ms,
            "spend": outcome.spend.to_json(),
        }))
        return
    from stratagem.search.api import show_run

    r = show_run(outcome.run_dir)
    console.print(f"stopped: {outcome.stop_reason}")
    console.print(leaderboard(r.views, r.reference_ms))
    console.print(strategy_table(st.strategy_counts(r.views)))
    console.print(spend_line(r.spend))
    if best is not None:
        comp = f", {best.compile_text()} vs torch.compile" if best.speedup_compile else ""
        console.print(f"best design: [bold]{outcome.best_path}[/] ({best.speedup_text()} vs eager{comp})",
                      highlight=False)
    else:
        console.print(f"[yellow]{outcome.no_gain}[/]; {outcome.best_path} holds the reference itself",
                      highlight=False)
    if outcome.spend.failed_calls:
        console.print(f"[yellow]{outcome.spend.failed_calls} LLM calls failed[/]; each one's error is in "
                      "the run database (`agent_calls`) and in the iteration notes")
    console.print(f"run directory: {outcome.run_dir}")


def _print_eval(console: Console, s: dict[str, Any]) -> None:
    color = {"valid": "green", "invalid": "red", "error": "magenta"}[s["status"]]
    t = Table(title=f"{s['problem']} · design {s['design_id'][:12]} · {s['device']}")
    t.add_column("validator")
    t.add_column("result")
    t.add_column("detail", overflow="fold")
    for name, v in s["validators"].items():
        detail = v["reason"] or ""
        if name == "correctness" and v["status"] == "passed":
            d = v["details"]
            detail = f"{len(d['trials'])} trials, max abs err {d['max_abs_err']:.3g}, max rel err {d['max_rel_err']:.3g}"
        if name == "timing" and v["status"] == "passed":
            rt = v["details"]["runtime"]
            ref = v["details"].get("reference") or {}
            detail = f"median {rt['median_ms']:.4f} ms, IQR {rt['iqr_ms']:.4f} ms, n={rt['n']}"
            if ref:
                detail += (f"; eager beside it {ref['median_ms']:.4f} ms, {v['details'].get('pairs')} block pairs, "
                           f"{len(v['details'].get('attempts') or [])} timing(s)")
        if name == "integrity" and v["status"] == "passed":
            detail = "checks: " + ", ".join(v["details"].get("checks", []))
        if name == "shapes" and v["status"] == "passed":
            sizes = [x.get("sizes") for x in v["details"].get("variants", []) if "max_abs_err" in x]
            detail = f"also correct with {sizes}" if sizes else v["details"].get("note", "")
        if name == "roofline" and v["status"] == "passed":
            d = v["details"]
            detail = (f"{d['sol_fraction']:.1%} of speed-of-light ({d['bound']}-bound floor {d['floor_ms']:.4g} ms)"
                      if d.get("checked") else d.get("note", ""))
        t.add_row(name, f"[{_COLORS[v['status']]}]{v['status']}[/]", detail)
    console.print(t)
    for v in s["validators"].values():
        tail = (v.get("details") or {}).get("stderr_tail") or (v.get("details") or {}).get("traceback")
        if v["status"] == "failed" and v["kind"] in ("harness_error", "crash", "problem_error", "compile_error") and tail:
            console.print("\n".join(str(tail).rstrip().splitlines()[-12:]), style="dim", markup=False)
    console.print(f"status: [bold {color}]{s['status']}[/]")
    if s["runtime_ms"] is not None:
        refs = ", ".join(f"{k} {v:.4f} ms" for k, v in s["reference_ms"].items() if v is not None)
        console.print(f"candidate {s['runtime_ms']:.4f} ms · reference {refs}")
    _print_speedups(console, s)


def _print_speedups(console: Console, s: dict[str, Any]) -> None:
    """The paired speedup, its interval and stability, and the baseline's state."""
    if s["speedup"] is not None:
        lo, hi = s["speedup_ci"] or (s["speedup"], s["speedup"])
        line = f"speedup vs eager (paired): [bold]{s['speedup']:.3g}x[/] [95% CI {lo:.3g}-{hi:.3g}]"
        comp = (s.get("speedups") or {}).get("compile")
        if comp:
            line += f" · vs torch.compile {comp['ratio']:.3g}x"
            if comp.get("baseline_fails"):
                line += " [yellow](compile fails correctness)[/]"
        console.print(line, highlight=False)
    stab = s.get("stability") or {}
    if stab.get("verdict") == "unstable":
        console.print("[yellow]timing unstable[/] (after re-timing): " + "; ".join(stab.get("reasons", [])),
                      highlight=False)
    base = s.get("baseline") or {}
    if base.get("cached"):
        console.print("[dim](torch.compile ratio from the cached baseline; `stratagem baseline --refresh` measures it again)[/]")
    for mode, reasons in (base.get("unstable") or {}).items():
        console.print(f"[yellow]baseline {mode} unstable[/]: " + "; ".join(reasons), highlight=False)
    for mode, why in (base.get("fails_correctness") or {}).items():
        console.print(f"[yellow]baseline {mode} fails the correctness check[/]: {why}", highlight=False, markup=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        rv = app(args=list(argv) if argv is not None else None, prog_name="stratagem", standalone_mode=False)
    except typer.Exit as e:
        return int(e.exit_code)
    except SystemExit as e:  # pragma: no cover - click may still raise it
        return int(e.code or 0)
    except typer.Abort:
        return 130
    except typer.TyperException as e:  # usage errors: bad or missing options and arguments
        show = getattr(e, "show", None)
        if callable(show):
            show()
        return int(getattr(e, "exit_code", 2))
    return rv if isinstance(rv, int) else 0


def run_app() -> None:
    sys.exit(main())
