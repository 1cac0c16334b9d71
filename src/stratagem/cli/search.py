"""Owns the search commands: run, resume, show, export, compare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

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
from stratagem.errors import ConfigError, ProblemError, QueueStalled


@app.command("run")
def run_cmd(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="KernelBench-format problem file, or a command problem's directory (problem.toml).")],
    model: Annotated[str | None, typer.Option("--model", metavar="MODEL", help="LLM: openai:NAME, anthropic:NAME, ollama:NAME, test (pydantic-ai's TestModel), or a model name served at --endpoint. None: the recipes policy.")] = None,
    endpoint: opt.EndpointOpt = None,
    agent_cmd: Annotated[str | None, typer.Option("--agent-cmd", metavar="CMD", help="A coding agent (Claude Code, Codex CLI, ...) as a shell command that writes the designs in the writing roles (Implementor; PIKE's optimize, fix, mutate, crossover), run in a fresh work directory per call ([agents.command]; docs/agents.md). The other roles keep --model.")] = None,
    agent_timeout: opt.AgentTimeoutOpt = None,
    policy: Annotated[str | None, typer.Option("--policy", metavar="POLICY", help="auto (AUTO's agents), pike-b or pike-o (PIKE; all three need --model), recipes or tune (no LLM). Default: auto with a model, pike-o with --agent-cmd alone, else the problem's own.")] = None,
    design: Annotated[Path | None, typer.Option("--design", metavar="FILE|DIR", exists=True, help="The template --policy tune tunes: a design file, or a directory of a command problem's editable files, declaring its parameters (docs/tune.md).")] = None,
    iterations: opt.IterationsOpt = None,
    patience: opt.PatienceOpt = None,
    implementors: opt.ImplementorsOpt = None,
    tune_evaluations: Annotated[int | None, typer.Option("--tune-evaluations", metavar="N", min=0, help="Points the loop evaluates when an agent returns a template instead of a fixed design, charged to the run's budgets (default 6; 0: the template's defaults only; docs/tune.md).")] = None,
    max_queries: opt.MaxQueriesOpt = None,
    max_tokens: opt.MaxTokensOpt = None,
    max_usd: opt.MaxUsdOpt = None,
    max_gpu_seconds: opt.MaxGpuSecondsOpt = None,
    max_wall_seconds: opt.MaxWallSecondsOpt = None,
    device: opt.DeviceOpt = None,
    integrity: opt.IntegrityOpt = None,
    correctness: opt.CorrectnessOpt = None,
    run_dir: opt.RunDirOpt = None,
    executor: opt.ExecutorOpt = None,
    queue: opt.QueueOpt = None,
    queue_wait: opt.QueueWaitOpt = None,
    serve: Annotated[bool, typer.Option("--serve", help="Serve the live report on http://127.0.0.1:PORT while the run goes on.")] = False,
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="The port of --serve.")] = 8765,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Search for a faster design of PROBLEM (a PyTorch problem's ModelNew, a command problem's
    editable files): iterations of a policy, every design proven by the harness and kept in the
    run directory's database. Ctrl-C stops cleanly; `stratagem resume RUN_DIR` continues."""
    overrides = {
        **harness_over(problem, device, integrity, correctness, executor, queue, queue_wait=queue_wait),
        "search": {"policy": policy, "iterations": iterations, "patience": patience,
                   "implementors": implementors, "tune_evaluations": tune_evaluations,
                   "max_queries": max_queries, "max_tokens": max_tokens,
                   "max_usd": max_usd, "max_gpu_seconds": max_gpu_seconds,
                   "max_wall_seconds": max_wall_seconds, "run_dir": run_dir},
        "agents": agents_over(model, endpoint, agent_cmd, agent_timeout),
        "policies": {"tune": {"design": str(design.resolve()) if design is not None else None}},
    }
    console = wide_console(stderr=as_json)
    try:
        cfg = load_config(config, overrides)
        if design is not None and cfg.policy != "tune":
            raise ConfigError(f"--design is the tune policy's template; the policy here is {cfg.policy or 'the default'} (add --policy tune)")
    except ConfigError as e:
        fail(console, e, as_json, 2)
    from stratagem.domains import load_problem
    from stratagem.search.api import check_policy, default_run_dir, start_run
    from stratagem.search.policies.registry import default_note

    try:
        loaded = load_problem(problem)
        where = Path(cfg.search.run_dir) if cfg.search.run_dir is not None else default_run_dir(loaded)
    except ProblemError as e:
        fail(console, e, as_json, 2)
    try:  # a policy this problem's domain offers, or a message naming what to do instead
        check_policy(cfg, loaded)
    except ConfigError as e:
        fail(console, e, as_json, 2)
    if (note := default_note(cfg)) is not None:
        console.print(note)
    server = None
    if serve:
        from stratagem.report.serve import serve_in_background

        try:
            server = serve_in_background(where, port=port)
        except OSError as e:
            fail(console, ConfigError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e})"),
                 as_json, 2)
        console.print(f"live report: http://127.0.0.1:{server.server_address[1]}/")
    try:
        _drive(console, as_json, lambda view: start_run(problem, cfg, where, view), where, loaded.domain)
    finally:
        if server is not None:
            server.shutdown()


@app.command("resume")
def resume_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory from `stratagem run`.")],
    iterations: Annotated[int | None, typer.Option("--iterations", metavar="ITERATIONS", help="Raise the iteration limit.")] = None,
    queue_wait: opt.QueueWaitOpt = None,
    as_json: opt.JsonOpt = False,
) -> None:
    """Continue a stopped or killed run from its database, with the settings it started with
    (--iterations and --queue-wait change theirs)."""
    from stratagem.search.api import resume_run, stored_domain

    console = wide_console(stderr=as_json)
    over = {"search": {"iterations": iterations}, "evaluation": {"queue_wait_s": queue_wait}}
    _drive(console, as_json, lambda view: resume_run(run_dir, view, over), run_dir, stored_domain(run_dir))


def _print_best_cases(console: Console, run_dir: Path, design_id: str) -> None:
    """The best design's per-case table, when the problem's objective has cases."""
    from stratagem.report.cases import latest_timing, print_cases
    from stratagem.store.sqlite import RunStore

    with RunStore.read(run_dir) as store:
        timing = latest_timing(store.evaluations(design_id))
    if timing:
        print_cases(console, timing, f"best design {design_id[:12]} per case")


@app.command("show")
def show_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    as_json: opt.JsonOpt = False,
) -> None:
    """Print a run's leaderboard, iterations, strategy counts and spend."""
    from stratagem.report.leaderboard import (
        failures_table,
        iterations_table,
        leaderboard,
        strategy_table,
    )
    from stratagem.report.live import spend_line
    from stratagem.report.run_json import run_json
    from stratagem.search.api import show_run
    from stratagem.search.numbers import counts

    console = wide_console()
    with exit_codes(console, as_json):
        r = show_run(run_dir)
    best, names = r.best, r.names
    if as_json:
        print(json.dumps(run_json(r)))
        return
    status = f"{r.run.status} ({r.run.stop_reason})" if r.run and r.run.stop_reason else (r.run.status if r.run else "-")
    console.print(f"[bold]{r.problem}[/] · {r.run_dir} · {status} · {len(r.iterations)} iterations",
                  highlight=False)
    console.print(counts(r.views).text(), highlight=False)
    for line in r.headline.lines():
        console.print(line, highlight=False)
    if r.confirmation is not None:
        from stratagem.cli.confirm import print_confirmed

        print_confirmed(console, r.confirmation, names, r.views)
    console.print(leaderboard(r.views, r.reference_ms, objective=r.objective, names=names))
    if best is not None:
        _print_best_cases(console, r.run_dir, best.id)
    failed = failures_table(r.views)
    if failed is not None:
        console.print(failed)
    console.print(iterations_table(r.iterations, r.views, names=names))
    console.print(strategy_table(r.strategy_counts))
    tuned = r.tuning
    if tuned is not None:
        _print_tuning(console, tuned, names.reference)
    _print_redteam(console, r.redteam)
    console.print(spend_line(r.spend))


def _print_redteam(console: Console, attempts: list[dict[str, Any]]) -> None:
    """A red-team run's attempts by class, and every attempt's outcome in full (nothing for other runs)."""
    if not attempts:
        return
    from stratagem.search.policies.redteam import views as redteam

    console.print(redteam.attempts_table(attempts))
    for line in redteam.attempt_lines(attempts):
        console.print(line, highlight=False, soft_wrap=True)


@app.command("export")
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    design: Annotated[str | None, typer.Argument(metavar="DESIGN", help="A design id (a prefix is enough); default: the best.")] = None,
    out: Annotated[Path | None, typer.Option("--out", metavar="PATH", help="Write here: a file (a design of one file), or a directory (several files, each under its own name). Default: print to stdout.")] = None,
) -> None:
    """Write a design's own files, ready to build, one headed by a comment in its own syntax
    (problem, run, speedups, device); a PyTorch design ends with load_reference_state_dict(model,
    state_dict), which loads the reference Model's weights into it whatever its own layout. A
    design of several files goes into the directory --out names (on stdout: each file under an
    `=== stratagem file: NAME ===` line)."""
    from stratagem.core.design import files_text
    from stratagem.search.api import show_run
    from stratagem.search.export import exported_files, pick, write_files

    console = Console(stderr=True)
    with exit_codes(console, False):
        r = show_run(run_dir)
        view = pick(r.views, design, r.best)
    files = exported_files(view, r.problem, r.run_dir, r.device, r.reference_ms or None, r.domain, r.main_file)
    if out is None:
        print(files_text(files), end="")
        if len(files) > 1:
            console.print(f"{len(files)} files: `stratagem export {run_dir} {view.id[:12]} --out DIR` writes "
                          "them into DIR", highlight=False)
        return
    written = write_files(files, out)
    from stratagem.search.headline import ratios_of

    shown = ", ".join(str(p) for p in written)
    console.print(f"wrote {shown} (design {view.id[:12]}, {ratios_of(view, r.names).reference.number()} "
                  f"vs {r.names.reference})", highlight=False)


def _print_tuning(console: Console, t: Any, reference: str) -> None:
    """The points a tune study tried (in order, with the best marked) and, per parameter
    value, how many points used it and the best speedup among them (over `reference`, as the
    run's domain names it)."""
    from rich.table import Table

    names = list(t.points[0].point)
    table = Table(title=f"tuning: {len(t.points)} points (docs/tune.md)")
    for col in ["#", "design", *names, "status", f"vs {reference}"]:
        table.add_column(col)
    for i, p in enumerate(t.points, start=1):
        mark = " (best)" if t.best is not None and p.design_id == t.best.design_id else ""
        table.add_row(str(i), p.design_id[:10], *(str(p.point.get(n, "-")) for n in names), p.status,
                      f"{p.speedup:.3g}x{mark}" if p.speedup is not None else "-")
    console.print(table)
    for name, values in t.by_value.items():
        shown = "; ".join(f"{v}: {n} tried, best {f'{s:.3g}x' if s is not None else '-'}" for v, (n, s) in values.items())
        console.print(f"  {name}: {shown}", highlight=False)


def _drive(console: Console, as_json: bool, start: Any, run_dir: Path, domain: str | None) -> None:
    """Run a search coroutine with the live view. Ctrl-C, and SIGTERM (`kill`, `timeout`)
    the same way, stop it cleanly: the run and its iteration marked interrupted, workers
    killed, their temporary directories removed, exit 130. `domain`: the problem's, whose
    words the live view speaks (None: the default domain's)."""
    import asyncio

    from stratagem.domains import names_of
    from stratagem.report.leaderboard import failures_table, leaderboard, strategy_table
    from stratagem.report.live import LiveView, spend_line
    from stratagem.report.run_json import design_json
    from stratagem.search.api import show_run
    from stratagem.search.headline import headline_of
    from stratagem.search.numbers import counts, passed
    from stratagem.search.policies.redteam import views as redteam

    with stopping_cleanly(console, as_json, f"everything so far is saved; continue with `stratagem resume {run_dir}`"):
        with LiveView(console, reference=names_of(domain).reference) as view:
            outcome = asyncio.run(start(None if as_json else view))

    best = outcome.best
    r = show_run(outcome.run_dir)
    names = r.names
    if as_json:
        print(json.dumps({
            **({"redteam": redteam.to_json(r.redteam)} if r.redteam else {}),
            "run_dir": str(outcome.run_dir), "stop_reason": outcome.stop_reason,
            "iterations": outcome.iterations, **counts(r.views).to_json(),
            "best": None if best is None else {**design_json(best, names), "path": str(outcome.best_path)},
            "no_gain": outcome.no_gain,
            "best_path": str(outcome.best_path) if outcome.best_path else None,
            "fastest": None if outcome.top is None else design_json(outcome.top, names),
            "reference_ms": outcome.reference_ms,
            "spend": outcome.spend.to_json(),
        }))
        return
    console.print(f"stopped: {outcome.stop_reason}")
    console.print(leaderboard(r.views, r.reference_ms, objective=r.objective, names=names))
    console.print(strategy_table(r.strategy_counts))
    console.print(spend_line(r.spend))
    console.print(counts(r.views).text(), highlight=False)
    _print_redteam(console, r.redteam)
    if r.confirmation is not None:
        from stratagem.cli.confirm import print_confirmed

        print_confirmed(console, r.confirmation, names, r.views)
    # the outcome's headline (the one the loop wrote best/ from); a caller's own outcome: its best
    head = outcome.headline if outcome.headline is not None else headline_of(
        [x for x in (outcome.best,) if x is not None], names)
    lines = head.lines()
    if best is not None:
        console.print(f"best design: [bold]{outcome.best_path}[/]", highlight=False)
    else:
        console.print(f"[yellow]{lines[0]}[/]; {outcome.best_path} holds the reference itself", highlight=False)
    verdict = head.ratios.compared.verdict if head.ratios is not None and head.ratios.compared else None
    for line in lines[1:] if best is None else lines:
        style = "yellow" if verdict in ("slower", "unknown", "unfair") and line is not lines[0] else ""
        console.print(Text("  " + line, style=style))
    failed = failures_table(r.views, last=5)
    if failed is not None and not any(passed(v) for v in r.views):
        console.print(failed)  # nothing passed: say why the last ones did not
    if outcome.spend.failed_calls:
        console.print(f"[yellow]{outcome.spend.failed_calls} LLM calls failed[/]; each one's error is in "
                      "the run database (`agent_calls`) and in the iteration notes")
    console.print(next_steps(outcome.run_dir, best is not None), highlight=False, soft_wrap=True)


@contextmanager
def stopping_cleanly(console: Console, as_json: bool, interrupted: str) -> Iterator[None]:
    """Ctrl-C, and SIGTERM (`kill`, `timeout`) the same way, stop the work inside cleanly: a
    line saying `interrupted` and what is kept (with `as_json`, a JSON record of status
    `interrupted` on stdout, as every exit of a `--json` command has one), exit 130; a queue no worker served within
    `queue_wait_s` (`QueueStalled`) the same way, with its message, exit 75 (EX_TEMPFAIL: try
    again once a worker serves it); stratagem's errors exit 2 (the configuration or the
    problem) or 1."""
    import os
    import signal

    def on_term(_sig: int, _frame: Any) -> None:  # become a Ctrl-C, which asyncio turns into a clean cancel
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, on_term)
    # a job a shell started in the background (`&`, nohup, a batch script) inherits SIGINT
    # ignored, and asyncio only turns a SIGINT into a cancel where Python's own handler is set:
    # without it, the SIGTERM above would become a Ctrl-C that nothing hears
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with exit_codes(console, as_json, (ConfigError, ProblemError)):
            try:
                yield
            except QueueStalled as e:
                if as_json:
                    print(json.dumps({"status": "waiting_for_queue", "error": str(e), "next": interrupted}))
                else:
                    console.print(f"[yellow]stopped[/]: {escape(str(e))}\n{interrupted}", highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_QUEUE_STALLED) from None
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]: {interrupted}", highlight=False)  # stderr with --json
        if as_json:  # stdout is one JSON record on every exit, a stop included
            print(json.dumps({"status": "interrupted", "error": "interrupted (Ctrl-C or SIGTERM)", "next": interrupted}))
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def next_steps(run_dir: Path, has_best: bool) -> str:
    """The run's last lines: where it is and what to do next, with the run directory filled in
    (printed unwrapped, so each command stays whole for copying)."""
    d = str(run_dir)
    export = (f"stratagem export {d} --out FILE  (the best design, headed by its provenance)" if has_best else
              f"stratagem export {d} DESIGN  (any design by its id; a prefix is enough)")
    return (f"run directory: {d}\nnext:\n"
            f"  stratagem show {d}  (every design, why each failed, iterations, spend)\n"
            f"  stratagem report {d}  (an HTML page with plots: {Path(d) / 'report.html'})\n  " + export)


@app.command("compare")
def compare_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR...", help="Run directories of one problem.")],
    plot_path: Annotated[Path | None, typer.Option("--plot", metavar="PNG", help="Where the plot goes (default: compare.png beside the first run).")] = None,
    as_json: opt.JsonOpt = False,
) -> None:
    """Compare runs of one problem (matched by the problem's source, not its file's name) at
    equal budgets: the best paired speedup so far against LLM queries and money, the mean best
    speedup over the budget every run reached, and a PNG plot of the curves --json lists. The
    runs are only read: nothing is written into them."""
    from stratagem.report.compare import compare_runs, dumps, plot, table, tuning_table

    console = wide_console()
    with exit_codes(console, as_json):
        cmp = compare_runs(run_dirs)
    png = plot(cmp, plot_path or run_dirs[0].parent / "compare.png")
    if as_json:
        print(json.dumps({**json.loads(dumps(cmp)), "plot": str(png)}))
        return
    console.print(table(cmp))
    if (tuned := tuning_table(cmp)) is not None:
        console.print(tuned)
    console.print(f"areas: the mean best speedup over the first {cmp.query_budget} queries (the budget every run "
                  f"reached; 1.00x until a run's first valid design) · plot: {png}")
    if cmp.money_note():
        console.print(f"money: {cmp.money_note()}", highlight=False)
