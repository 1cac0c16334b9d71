"""Owns `redteam`: an attacker run against a problem (the `redteam` policy), and `--replay` of a
breach corpus through the harness as it is now (docs/integrity.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from stratagem.cli import common as opt
from stratagem.cli.common import agents_over, app, exit_codes, fail, harness_over, wide_console
from stratagem.cli.search import _drive
from stratagem.config import load_config
from stratagem.errors import ConfigError, ProblemError


@app.command("redteam")
def redteam_cmd(
    problem: Annotated[Path | None, typer.Argument(metavar="PROBLEM", help="The problem to attack: a KernelBench-format file or a command problem's directory (problem.toml); its domain must have a red-team audit.")] = None,
    model: Annotated[str | None, typer.Option("--model", metavar="MODEL", help="The attacker's LLM (openai:NAME, anthropic:NAME, ollama:NAME, test, or a name served at --endpoint).")] = None,
    endpoint: opt.EndpointOpt = None,
    agent_cmd: Annotated[str | None, typer.Option("--agent-cmd", metavar="CMD", help="A coding agent (or any script) as a shell command that writes each attempt, run in a fresh work directory per call (docs/agents.md).")] = None,
    agent_timeout: opt.AgentTimeoutOpt = None,
    max_queries: Annotated[int | None, typer.Option("--max-queries", metavar="N", min=1, help="Attempts the attacker may write (queries; default 12).")] = None,
    attempts: Annotated[int | None, typer.Option("--attempts", metavar="N", min=1, help="Attempts written at once per iteration (default 2).")] = None,
    max_gpu_seconds: opt.MaxGpuSecondsOpt = None,
    max_wall_seconds: opt.MaxWallSecondsOpt = None,
    max_usd: opt.MaxUsdOpt = None,
    corpus: Annotated[Path | None, typer.Option("--corpus", metavar="DIR", help="Where each breach is written as a test fixture (default RUN_DIR/breaches).")] = None,
    replay: Annotated[Path | None, typer.Option("--replay", metavar="CORPUS", help="Replay a breach corpus through the harness instead: exit 1 if any fixture is accepted again or cannot be judged.")] = None,
    device: opt.DeviceOpt = None,
    integrity: opt.IntegrityOpt = None,
    correctness: opt.CorrectnessOpt = None,
    executor: opt.ExecutorOpt = None,
    queue: opt.QueueOpt = None,
    queue_wait: opt.QueueWaitOpt = None,
    run_dir: opt.RunDirOpt = None,
    as_json: opt.JsonOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Try to fool the harness on PROBLEM: an attacker writes designs meant to be accepted while
    wrong, faster only when measured, or not doing the work; each goes through the ordinary
    evaluation, an accepted one through a stronger audit, and every breach becomes a test
    fixture (the evaluation-time budget counts the audits too). With --replay CORPUS, re-run a
    corpus's fixtures and fail if any is accepted."""
    console = wide_console(stderr=as_json)
    if replay is not None:
        _replay(console, replay, device, config, as_json)
        return
    if problem is None:
        fail(console, ConfigError("PROBLEM is missing: give the problem to attack, or --replay CORPUS"), as_json, 2)
    overrides = {
        **harness_over(problem, device, integrity, correctness, executor, queue, queue_wait=queue_wait),
        "search": {"policy": "redteam", "max_queries": max_queries, "max_usd": max_usd,
                   "max_gpu_seconds": max_gpu_seconds, "max_wall_seconds": max_wall_seconds, "run_dir": run_dir},
        "agents": agents_over(model, endpoint, agent_cmd, agent_timeout),
        "policies": {"redteam": {"corpus": str(corpus.resolve()) if corpus is not None else None,
                                 "attempts": attempts}},
    }
    from stratagem.domains import get_domain, load_problem
    from stratagem.search.api import check_policy, default_run_dir, start_run

    try:
        cfg = load_config(config, overrides)
        loaded = load_problem(problem)
        if "breach" not in get_domain(loaded.domain).graphs:
            raise ConfigError(f"{problem}: a {loaded.domain} problem, and the {loaded.domain} domain has no red-team "
                              "audit; redteam attacks problems of a domain that has one (pytorch, command)")
        check_policy(cfg, loaded)
    except (ConfigError, ProblemError) as e:
        fail(console, e, as_json, 2)
    where = Path(cfg.search.run_dir) if cfg.search.run_dir is not None else default_run_dir(loaded)
    _drive(console, as_json, lambda view: start_run(problem, cfg, where, view), where, loaded.domain)


def _replay(console: Any, corpus: Path, device: str | None, config: Path | None, as_json: bool) -> None:
    from stratagem.search.policies.redteam.corpus import replay
    from stratagem.search.policies.redteam.views import replay_table

    with exit_codes(console, as_json):
        cfg = load_config(config, {"evaluation": {"device": device}})
        rows = replay(corpus, cfg.evaluation)
    fooled = [r for r in rows if not r.held]
    if as_json:
        print(json.dumps({"corpus": str(corpus), "fixtures": len(rows), "held": len(rows) - len(fooled),
                          "rows": [{"fixture": r.name, "exploit": r.exploit, "status": r.status,
                                    "caught_by": r.caught_by} for r in rows]}))
    else:
        console.print(replay_table(rows))
        console.print(f"{len(rows) - len(fooled)} of {len(rows)} breaches rejected by the harness now"
                      + (f"; [bold red]{len(fooled)} still get through or cannot be judged[/]" if fooled else ""))
    if fooled:
        raise typer.Exit(1)
