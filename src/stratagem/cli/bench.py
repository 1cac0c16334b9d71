"""Owns `stratagem bench`: a policy over a whole suite of problems (a KernelBench or PIKE
checkout, or any folder of problems), one run per problem under one suite directory, and the
suite's results (`report/suite.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from stratagem.cli import common as opt
from stratagem.cli.common import (
    EXIT_QUEUE_STALLED,
    agents_over,
    app,
    exit_codes,
    fail,
    harness_over,
    wide_console,
)
from stratagem.config import load_config
from stratagem.errors import ConfigError


@app.command("bench")
def bench_cmd(
    suite_path: Annotated[Path | None, typer.Argument(metavar="SUITE_PATH", help="A KernelBench checkout (KernelBench/level{N}/{id}_{Name}.py), a PIKE checkout or its level3-pike/ or level5/ folder, or any folder of problems (a problem.py per directory, KernelBench-format .py files, command problems' directories with problem.toml).")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", metavar="SUITE_DIR", help="Continue this suite problem by problem (a finished problem is never run again) with the settings it started with.")] = None,
    levels: Annotated[str | None, typer.Option("--levels", metavar="LEVELS", help="The checkout's levels: 1,2,3 (KernelBench) or 3-pike,5 (PIKE). Default: every level* folder found.")] = None,
    problems: Annotated[str | None, typer.Option("--problems", metavar="IDS", help="Problem ids: 1-20, 1,3,7-9, or a file listing them.")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", metavar="N", help="Problems at once, sharing one executor in this process, each run on the GPU with the fewest runs (default: one per GPU slot, workers_per_gpu per GPU; 1 on the CPU).")] = None,
    model: Annotated[str | None, typer.Option("--model", metavar="MODEL", help="LLM as for `stratagem run`. None: the recipes policy.")] = None,
    endpoint: opt.EndpointOpt = None,
    policy: Annotated[str | None, typer.Option("--policy", metavar="POLICY", help="auto, pike-b, pike-o (need --model) or recipes.")] = None,
    iterations: opt.IterationsOpt = None,
    patience: opt.PatienceOpt = None,
    implementors: opt.ImplementorsOpt = None,
    max_queries: opt.MaxQueriesOpt = None,
    max_tokens: opt.MaxTokensOpt = None,
    max_usd: opt.MaxUsdOpt = None,
    max_gpu_seconds: opt.MaxGpuSecondsOpt = None,
    max_wall_seconds: opt.MaxWallSecondsOpt = None,
    device: opt.DeviceOpt = None,
    integrity: opt.IntegrityOpt = None,
    correctness: opt.CorrectnessOpt = None,
    executor: opt.ExecutorOpt = None,
    queue: opt.QueueOpt = None,
    queue_wait: opt.QueueWaitOpt = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", metavar="DIR", help="The suite directory (default runs/suite-NAME-TIMESTAMP): suite.json and runs/KEY/ per problem.")] = None,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Run a policy over a suite of problems, one run per problem under one suite directory
    (suite.json records the problems, the options and each problem's state), then print the
    suite's results: per problem and fast_p, geometric means over the reference (PyTorch:
    eager) and the baseline set beside it (PyTorch: compile), unclamped and clamped at 1x,
    correctness rate, cost per problem. Ctrl-C stops cleanly; `stratagem bench --resume
    SUITE_DIR` continues. stratagem reads the checkout in place and copies none of its files.
    The iterations, patience, Implementors and budgets are each problem's run's."""
    from stratagem.domains import check_sections
    from stratagem.search.suite import default_suite_dir, new_suite
    from stratagem.search.suite_problems import find_problems, parse_ids, parse_levels

    console = wide_console(stderr=as_json)
    if resume is not None:
        if suite_path is not None:
            fail(console, ConfigError("bench: give SUITE_PATH for a new suite or --resume SUITE_DIR, not both"),
                 as_json, 2)
        _drive(console, as_json, resume, jobs)
        return
    if suite_path is None:
        fail(console, ConfigError("bench: give SUITE_PATH (or --resume SUITE_DIR)"), as_json, 2)
    overrides = {
        **harness_over(suite_path, device, integrity, correctness, executor, queue, queue_wait=queue_wait),
        "search": {"policy": policy, "iterations": iterations, "patience": patience,
                   "implementors": implementors, "max_queries": max_queries, "max_tokens": max_tokens,
                   "max_usd": max_usd, "max_gpu_seconds": max_gpu_seconds,
                   "max_wall_seconds": max_wall_seconds},
        "agents": agents_over(model, endpoint),
    }
    with exit_codes(console, as_json):
        cfg = load_config(config, overrides)
        check_sections(cfg.evaluation)  # a bad domain setting is refused before the suite is written
        chosen_levels = parse_levels(levels) if levels else None
        ids = parse_ids(problems) if problems else None
        found = find_problems(suite_path, chosen_levels, ids)
        suite_dir = run_dir or default_suite_dir(suite_path)
        new_suite(suite_dir, suite_path.resolve(), found, cfg, jobs=jobs, levels=chosen_levels,
                  ids=sorted(ids) if ids is not None else None)
    console.print(f"suite: {suite_dir} · {len(found)} problems · {jobs or 'one per GPU slot (1 on the CPU)'} at once",
                  highlight=False)
    _drive(console, as_json, suite_dir, None)


def _drive(console: Console, as_json: bool, suite_dir: Path, jobs: int | None) -> None:
    """Run the suite with a line per problem's change of state; Ctrl-C and SIGTERM stop it
    cleanly (the running problems marked interrupted, exit 130); then print its results."""
    import asyncio

    from stratagem.cli.search import stopping_cleanly
    from stratagem.report.suite_live import SuiteLiveView
    from stratagem.search.suite import run_suite

    kept = f"finished problems are kept; continue with `stratagem bench --resume {suite_dir}`"
    with stopping_cleanly(console, as_json, kept), SuiteLiveView(console, suite_dir) as view:
        asyncio.run(run_suite(suite_dir, jobs=jobs, on_change=view.changed))  # a table on a terminal, lines elsewhere
    print_results(console, as_json, suite_dir)
    from stratagem.search.suite import QUEUE_STALLED
    from stratagem.search.suite_manifest import read_manifest

    stalled = [p.key for p in read_manifest(suite_dir).problems
               if p.state == "interrupted" and (p.stop_reason or "").startswith(QUEUE_STALLED)]
    if stalled:  # stopped cleanly: no worker served the queue within evaluation.queue_wait_s
        console.print(f"[yellow]stopped[/]: {len(stalled)} problems wait for a queue worker ({', '.join(stalled[:5])}"
                      f"{', ...' if len(stalled) > 5 else ''}); serve the queue, then `stratagem bench --resume "
                      f"{suite_dir}`", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_QUEUE_STALLED)


def print_results(console: Console, as_json: bool, suite_dir: Path) -> None:
    """The suite's results: one JSON object on stdout, or the summary and problem tables."""
    from rich.table import Table

    from stratagem.report.suite import (
        problem_header,
        problem_table_rows,
        rows_of_suite,
        suite_json,
        suite_names,
        summary,
        summary_lines,
    )
    from stratagem.search.suite_manifest import read_manifest

    rows = rows_of_suite(suite_dir)
    if as_json:
        print(json.dumps({"suite_dir": str(suite_dir), "states": read_manifest(suite_dir).counts(),
                          **suite_json(rows)}))
        return
    names = suite_names(rows)
    header = problem_header(names)
    t = Table(title="Problems")
    # problem, state, best vs the reference, vs the compared baseline (a domain with one), correct,
    # queries, USD, device s
    keep = [0, 1, 4, *([5] if names.compared else []), 6, 8, 9, 10]
    for i in keep:
        t.add_column(header[i].split(", chained via ")[0], no_wrap=i == 0)
    for r in problem_table_rows(rows):
        t.add_row(*[r[i] for i in keep])
    console.print(t)
    s = Table(title="Summary")
    s.add_column("summary")
    s.add_column("value")
    for label, value in summary_lines(summary(rows, names), names):
        s.add_row(label, value)
    console.print(s)
    console.print(f"suite directory: {suite_dir}\nnext:\n  stratagem report --suite {suite_dir}  (an HTML page)\n"
                  f"  stratagem show {suite_dir}/runs/KEY  (one problem's run)", highlight=False, soft_wrap=True)
