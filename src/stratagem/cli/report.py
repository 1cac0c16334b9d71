"""Owns the report commands: `report` (one HTML file, or a suite of runs), `serve` (the live
page) and `analyze alignment|clusters` (the AUTO paper's analyses as tables or JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from stratagem.cli.common import JsonOpt, app, fail, wide_console
from stratagem.errors import ConfigError, StratagemError

analyze_app = typer.Typer(help="The AUTO paper's analyses of a run: alignment with BO, code clusters.",
                          no_args_is_help=True)
app.add_typer(analyze_app, name="analyze")


def _run_dir(console, run_dir: Path, as_json: bool) -> Path:  # type: ignore[no-untyped-def]
    from stratagem.store.sqlite import RunStore

    if not run_dir.is_dir():
        fail(console, ConfigError(f"{run_dir}: no such directory (RUN_DIR is a directory made by `stratagem run`)"),
             as_json, 2)
    if not (run_dir / RunStore.DB_NAME).exists():
        fail(console, StratagemError(f"{run_dir} holds no run database ({RunStore.DB_NAME})"), as_json, 1)
    return run_dir


def _xis(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError(f"--xi: {text!r} is not a comma-separated list of numbers (e.g. 0.01,0.1,1,10)") from e
    if not out or any(x < 0 for x in out):
        raise ConfigError(f"--xi: {text!r}: give one or more exploration factors >= 0")
    return out


@app.command("report")
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR...", help="A run directory (several with --suite, or a suite directory from `stratagem bench`).")],
    out: Annotated[Path | None, typer.Option("--out", metavar="FILE", help="Where the HTML goes (default RUN_DIR/report.html; suite: report-suite.html here, or in the suite directory).")] = None,
    suite: Annotated[bool, typer.Option("--suite", help="One report over many runs (one per problem): a per-problem table, fast_p and the geometric mean.")] = False,
    xi: Annotated[str, typer.Option("--xi", metavar="XI", help="Exploration factors of the BO alignment.")] = "0.01,0.1,1,10",
) -> None:
    """Write a self-contained HTML report of a run (opens offline: figures embedded)."""
    console = wide_console()
    try:
        xis = _xis(xi)
        if suite:
            from stratagem.report.suite import write_suite
            from stratagem.search.suite_manifest import is_suite_dir

            dirs = [d if is_suite_dir(d) else _run_dir(console, d, False) for d in run_dirs]
            here = run_dirs[0] if len(run_dirs) == 1 and is_suite_dir(run_dirs[0]) else Path(".")
            path = write_suite(dirs, out or here / "report-suite.html")
        else:
            if len(run_dirs) != 1:
                raise ConfigError("report: give one RUN_DIR, or several with --suite")
            from stratagem.report.html import write_report

            path = write_report(_run_dir(console, run_dirs[0], False), out, xis=xis)
    except ConfigError as e:
        fail(console, e, False, 2)
    except StratagemError as e:
        fail(console, e, False, 1)
    console.print(f"report: {path}")


@app.command("serve")
def serve_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory (it may still be running).")],
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="Port on 127.0.0.1.")] = 8765,
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="Address to bind (127.0.0.1: this machine only).")] = "127.0.0.1",
) -> None:
    """Serve a run's report on localhost; an open page follows the run (Ctrl-C stops)."""
    from stratagem.report.serve import make_server

    console = wide_console()
    try:
        server = make_server(run_dir, host, port)
    except OSError as e:
        fail(console, ConfigError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror or e})"), False, 2)
    console.print(f"serving {run_dir} at http://{host}:{server.server_address[1]}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _print_rows(console, header: list[str], rows: list[list[str]]) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    t = Table()
    for h in header:
        t.add_column(h)
    for r in rows:
        t.add_row(*[str(c) for c in r])
    console.print(t)


@analyze_app.command("alignment")
def alignment_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    xi: Annotated[str, typer.Option("--xi", metavar="XI", help="Exploration factors (comma-separated).")] = "0.01,0.1,1,10",
    as_json: JsonOpt = False,
) -> None:
    """How the run's choices align with Bayesian optimization, for each exploration factor xi."""
    from stratagem.report import alignment as al
    from stratagem.report.html import load_run

    console = wide_console()
    try:
        xis = _xis(xi)
    except ConfigError as e:
        fail(console, e, as_json, 2)
    data = load_run(_run_dir(console, run_dir, as_json))
    plans = {it.n: (it.plan or {}).get("strategy") for it in data.iterations}
    a = al.align([v for v in data.views if v.source.strip()], plans, xis)
    if as_json:
        print(json.dumps({"xis": list(a.xis), "note": a.note, "basis": a.basis, "efficiency": [
            {"xi": e.xi, "iterations": e.iterations, "strategist": e.strategist, "implementor": e.implementor,
             "explore_share": e.explore_share, "labelled": e.labelled} for e in a.efficiency],
            "iterations": [{"iteration": r.iteration, "xi": r.xi, "strategy": r.strategy, "intended": r.intended,
                            "bo_choice": r.bo_choice, "labels": {lab.design_id: lab.kind for lab in r.labels}}
                           for r in a.per_iteration]}))
        return
    if a.note:
        console.print(a.note)
    if a.basis == "params":
        console.print("the surrogate sees each design by its template parameters (every design is a point of one tune study)")
    _print_rows(console, ["xi", "iterations judged", "Strategist matches BO", "Implementors carry out the plan",
                          "exploratory designs", "labelled"], al.efficiency_rows(a))


@analyze_app.command("clusters")
def clusters_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    threshold: Annotated[float, typer.Option("--threshold", metavar="T", help="Co-occurrence at which two designs share a cluster.")] = 0.5,
    plot: Annotated[Path | None, typer.Option("--plot", metavar="PNG", help="Write the t-SNE map here.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A t-SNE map of the run's code and its consensus clusters, each described."""
    from stratagem.report import alignment as al
    from stratagem.report.html import load_run

    console = wide_console()
    if not 0.0 < threshold <= 1.0:
        fail(console, ConfigError(f"--threshold {threshold}: give a co-occurrence in (0, 1]"), as_json, 2)
    data = load_run(_run_dir(console, run_dir, as_json))
    views = [v for v in data.views if v.source.strip()]
    c = al.cluster(views, threshold=threshold)
    if plot is not None and not c.note:
        from stratagem.report import figures

        plot.write_bytes(figures.cluster_map(c.ids, c.map2d, c.assignment, {v.id: v.speedup for v in views}))
    if as_json:
        print(json.dumps({"note": c.note, "threshold": c.threshold, "clusters": [
            {"label": k.label, "designs": list(k.ids), "best": k.best_id, "best_speedup": k.best_speedup,
             "tokens": list(k.tokens)} for k in c.clusters]}))
        return
    if c.note:
        console.print(c.note)
    text = {v.id: v.speedup_text() for v in views}
    _print_rows(console, ["cluster", "designs", "best", f"best vs {data.names.reference} [95% CI]", "distinctive tokens"],
                [[k.label, str(len(k.ids)), (k.best_id or "-")[:12],
                  text.get(k.best_id or "", "-") if k.best_speedup else "-", " ".join(k.tokens)] for k in c.clusters])
