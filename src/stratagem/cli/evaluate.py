"""Owns the evaluation commands: eval, baseline, calibrate, audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from stratagem.cli.common import (
    COLORS,
    ConfigOpt,
    CorrectnessOpt,
    DeviceOpt,
    JsonOpt,
    app,
    config_for,
    fail,
)
from stratagem.config import DEFAULT_TIMEOUT_S
from stratagem.errors import CandidateError, ConfigError, ProblemError, StratagemError


@app.command("eval")
def eval_cmd(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file.")],
    candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE", help="Candidate file defining ModelNew.")],
    device: DeviceOpt = None,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="TIMEOUT", help=f"Worker wall-clock limit in seconds, compile included (default {DEFAULT_TIMEOUT_S:g} s; a problem may set its own)."),
    ] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", metavar="DIR", help="Record the evaluation in this run directory.")] = None,
    integrity: Annotated[str | None, typer.Option("--integrity", metavar="INTEGRITY", help="lenient (default: libraries and torch ops allowed) or strict (the heavy work must run in the candidate's own kernels)."),
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
        cfg = config_for(config, device, timeout, integrity, correctness)
        ev = evaluate_files(problem, candidate, cfg.evaluation, run_dir=run_dir)
    except (ConfigError, ProblemError, CandidateError) as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)
    summary = ev.summary()
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        _print_eval(console, summary)
    raise typer.Exit(1 if summary["status"] == "error" else 0)


@app.command("baseline")
def baseline_cmd(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file.")],
    device: DeviceOpt = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if cached.")] = False,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Time the reference PROBLEM: eager and torch.compile (plus max-autotune on a GPU)."""
    from stratagem.evaluation.api import baseline_file

    console = Console(stderr=as_json)
    try:
        cfg = config_for(config, device)
        prob, base = baseline_file(problem, cfg.evaluation, refresh=refresh)
    except (ConfigError, ProblemError) as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)
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
        cfg = config_for(config, device)
        peaks, path = calibrate_device(cfg.evaluation)
    except ConfigError as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)
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
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file.")],
    device: DeviceOpt = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Check PROBLEM for null models (zeros, a constant, an input copy, half precision, a
    subsample) that pass its correctness check, and whether its output depends on the seed."""
    from stratagem.evaluation.api import audit_file

    console = Console(stderr=as_json)
    try:
        cfg = config_for(config, device)
        prob, verdict, env = audit_file(problem, cfg.evaluation)
    except (ConfigError, ProblemError) as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)
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


def _print_eval(console: Console, s: dict[str, Any]) -> None:
    color = {"valid": "green", "invalid": "red", "error": "magenta", "needs_gpu": "yellow"}[s["status"]]
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
        t.add_row(name, f"[{COLORS[v['status']]}]{v['status']}[/]", detail)
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
            elif comp.get("baseline_unstable"):
                line += " [yellow](compile baseline unstable)[/]"
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
