"""Owns the evaluation commands: eval, baseline, calibrate, audit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from stratagem.cli import common as opt
from stratagem.cli.common import app, config_for, exit_codes
from stratagem.config import DEFAULT_TIMEOUT_S
from stratagem.errors import CandidateError, ConfigError, ProblemError
from stratagem.report.evaluation import (
    audit_json,
    baseline_json,
    print_audit,
    print_baseline,
    print_eval,
)


@app.command("eval")
def eval_cmd(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file, or a command problem's directory (problem.toml: docs/command.md).")],
    candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE", help="A design file, taken as the problem's main file (a PyTorch candidate defining ModelNew; a command problem's first editable file), or a directory holding a design's files.")],
    device: opt.DeviceOpt = None,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="TIMEOUT", help=f"Limit in seconds on the whole evaluation of the design, compiles included unless [evaluation] compile_timeout_s is set too (default: {DEFAULT_TIMEOUT_S:g} s for correctness, integrity, shapes and timing, raised to fit a slow reference, and compile_timeout_s for builds; a problem may set its own)."),
    ] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", metavar="DIR", help="Record the evaluation in this run directory.")] = None,
    integrity: opt.IntegrityOpt = None,
    correctness: opt.CorrectnessOpt = None,
    executor: opt.ExecutorOpt = None,
    queue: opt.QueueOpt = None,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Evaluate one CANDIDATE against one PROBLEM: static checks, load, correctness,
    integrity, shapes, timing, roofline."""
    from stratagem.evaluation.api import evaluate_files
    from stratagem.report.live import stage_view

    console = Console(stderr=as_json)
    with exit_codes(console, as_json, (ConfigError, ProblemError, CandidateError)):
        cfg = config_for(config, device, timeout, integrity, correctness, executor, queue, problem)
        with stage_view(Console(stderr=True), f"evaluating {candidate.name}") as on_stage:
            ev = evaluate_files(problem, candidate, cfg.evaluation, run_dir=run_dir, on_stage=on_stage)
    summary = ev.summary()
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        print_eval(console, summary)
    raise typer.Exit(1 if summary["status"] == "error" else 0)


@app.command("baseline")
def baseline_cmd(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file.")],
    device: opt.DeviceOpt = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if cached.")] = False,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Time the reference PROBLEM: eager and torch.compile (plus max-autotune on a GPU)."""
    from stratagem.evaluation.api import baseline_file
    from stratagem.report.live import stage_view

    console = Console(stderr=as_json)
    with exit_codes(console, as_json, (ConfigError, ProblemError)):
        cfg = config_for(config, device)
        with stage_view(Console(stderr=True), f"timing the reference of {problem.name}") as on_stage:
            prob, base = baseline_file(problem, cfg.evaluation, refresh=refresh, on_stage=on_stage)
    out = baseline_json(prob, base)
    _emit(out, as_json, lambda: print_baseline(console, prob.name, base, out))


@app.command("calibrate")
def calibrate_cmd(
    device: opt.DeviceOpt = None,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Measure the device's peaks again (memory bandwidth, matmul rates per math mode) for the
    roofline check, replacing the cached ones (kept in $STRATAGEM_CACHE_DIR/peaks/). Run it on
    an idle machine."""
    from stratagem.evaluation.api import calibrate_device, peaks_domain

    console = Console(stderr=as_json)
    with exit_codes(console, as_json, (ConfigError, ProblemError)):
        cfg = config_for(config, device)
        peaks, path = calibrate_device(cfg.evaluation, peaks_domain())
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
    device: opt.DeviceOpt = None,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Check PROBLEM for null models (zeros, a constant, an input copy, half precision, a
    subsample) that pass its correctness check, and whether its output depends on the seed."""
    from stratagem.evaluation.api import audit_file

    console = Console(stderr=as_json)
    with exit_codes(console, as_json, (ConfigError, ProblemError)):
        cfg = config_for(config, device)
        prob, verdict, env = audit_file(problem, cfg.evaluation)
    out = audit_json(prob, verdict, env)
    _emit(out, as_json, lambda: print_audit(console, prob.name, env, out))


def _emit(out: dict[str, Any], as_json: bool, show: Callable[[], None]) -> None:
    """Print a reference-only command's record (`--json`) or its view, and exit 0 when valid."""
    if as_json:
        print(json.dumps(out, default=str))
    else:
        show()
    raise typer.Exit(0 if out["status"] == "valid" else 1)


@app.command("worker", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker_cmd(ctx: typer.Context) -> None:
    """Serve a queue folder on this (GPU) host: claim requests, evaluate each in the sandbox,
    answer. Options: --queue DIR [--device cpu|cuda|cuda:N] [--slots N] [--once] [--max-seconds S]
    [--poll-s S] [--lease-s S]. Needs no LLM library: where typer is missing, run
    `python -m stratagem.evaluation.queue_worker` with the same options."""
    from stratagem.evaluation.queue_worker import main as worker_main

    raise typer.Exit(worker_main(list(ctx.args)))
