"""Owns what every command shares: the typer app, the common options, config loading and the
error exit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from stratagem.config import StratagemConfig, load_config
from stratagem.errors import ConfigError, StratagemError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: no `<bool>` type tags beside flags
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

def _version(value: bool) -> None:
    if value:
        import platform

        import stratagem

        print(f"stratagem {stratagem.__version__} (Python {platform.python_version()})")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """stratagem: search for faster GPU code with LLM agents."""


DeviceOpt = Annotated[str | None, typer.Option("--device", metavar="DEVICE", help="auto (GPU if visible, else CPU), cpu, cuda or cuda:N.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", metavar="FILE", help="TOML config file.")]


ExecutorOpt = Annotated[str | None, typer.Option("--executor", metavar="EXECUTOR", help="local (this machine), queue (a folder served by `stratagem worker --queue DIR` on the GPU hosts) or ray (a Ray cluster: RAY_ADDRESS or [evaluation] ray_address, else a local one; pip install 'stratagem[ray]').")]
QueueOpt = Annotated[Path | None, typer.Option("--queue", metavar="DIR", help="The queue folder of --executor queue (implies it).")]


QueueWaitOpt = Annotated[float | None, typer.Option("--queue-wait", metavar="S", min=0.001, help="With the queue executor: stop the run cleanly (exit 75) once no worker has touched the queue for S seconds while it waits; `stratagem resume` continues it ([evaluation] queue_wait_s; default: no bound).")]

EXIT_QUEUE_STALLED = 75
"""The exit code of a run stopped because no worker served its queue (`QueueStalled`):
EX_TEMPFAIL, try again (`stratagem resume`) once a worker serves it."""


def executor_over(executor: str | None, queue: Path | None, queue_wait: float | None = None) -> dict[str, object]:
    """The evaluation overrides of --executor, --queue (--queue alone means the queue) and
    --queue-wait."""
    return {"executor": executor or ("queue" if queue is not None else None), "queue_dir": queue,
            "queue_wait_s": queue_wait}


def domain_over(integrity: str | None, correctness: str | None, problem: Path) -> dict[str, object]:
    """The overrides of --integrity and --correctness: settings of the own section of the
    domain that claims `problem` (`[pytorch]`; a suite's folder: of each domain of its
    problems), as `config.DOMAIN_OPTIONS` names them. A domain without such a setting is told
    when the configuration meets the registry (`domains.check_sections`: an error naming the
    option and the domain); a path no domain claims gets none (loading it says why)."""
    given = {"integrity": integrity, "correctness": {"mode": correctness} if correctness is not None else None}
    if integrity is None and correctness is None:
        return {}
    return {name: given for name in _domains_of(problem)}


def _domains_of(path: Path) -> list[str]:
    """The domains of the problem at `path`, or of the suite's problems under it."""
    from stratagem.domains import claimant
    from stratagem.search.suite_problems import find_problems

    one = claimant(path)
    if one is not None:
        return [one.name]
    try:
        found = find_problems(path) if path.is_dir() else []
    except StratagemError:
        return []
    return sorted({d.name for p in found if (d := claimant(Path(p.path))) is not None})


def harness_over(
    problem: Path | None, device: str | None, integrity: str | None = None, correctness: str | None = None,
    executor: str | None = None, queue: Path | None = None, timeout: float | None = None,
    queue_wait: float | None = None,
) -> dict[str, object]:
    """The overrides of the options that set up the harness, as every command that evaluates
    gives them: `[evaluation]`'s (--device, --timeout, --executor, --queue, --queue-wait) and
    --integrity and --correctness in `problem`'s domain's section (`domain_over`; none without a
    problem)."""
    domain = domain_over(integrity, correctness, problem) if problem is not None else {}
    return {"evaluation": {"device": device, "timeout_s": timeout, **executor_over(executor, queue, queue_wait)},
            **domain}


def config_for(
    config: Path | None, device: str | None, timeout: float | None = None, integrity: str | None = None,
    correctness: str | None = None, executor: str | None = None, queue: Path | None = None,
    problem: Path | None = None,
) -> StratagemConfig:
    """The configuration of an evaluation command (the file, then its options: `harness_over`),
    its domain sections checked."""
    from stratagem.domains import check_sections

    cfg = load_config(config, harness_over(problem, device, integrity, correctness, executor, queue, timeout))
    check_sections(cfg.evaluation)
    return cfg


CorrectnessOpt = Annotated[str | None, typer.Option("--correctness", metavar="CORRECTNESS", help="reference (the default: precision judged by what ran, a design below the "
                                       "reference's precision failing whatever its error; then KernelBench's tolerances "
                                       "against eager, and where they fail, close to a float64 run as the reference's "
                                       "precision predicts: TF32 references), fixed "
                                       "(KernelBench's tolerances only) or calibrated (within a factor of eager's own error "
                                       "against a float64 run of the reference, no tolerance)."),
]


EndpointOpt = Annotated[list[str] | None, typer.Option("--endpoint", metavar="URL", help="OpenAI-compatible base URL serving --model (repeat for a pool).")]
AgentTimeoutOpt = Annotated[float | None, typer.Option("--agent-timeout", metavar="SECONDS", help="Wall-clock limit of one --agent-cmd call; its process group is killed past it (default 1800).")]
IntegrityOpt = Annotated[str | None, typer.Option("--integrity", metavar="INTEGRITY", help="lenient (the default: library calls allowed) or strict (the heavy work must run in the design's own kernels).")]
RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", metavar="DIR", help="Run directory (default runs/PROBLEM-TIMESTAMP).")]

# the search's limits, as run and bench take them (bench: for each problem's run)
IterationsOpt = Annotated[int | None, typer.Option("--iterations", metavar="ITERATIONS", help="Iterations (default 10).")]
PatienceOpt = Annotated[int | None, typer.Option("--patience", metavar="PATIENCE", help="Stop after K iterations without a new best (default 3).")]
ImplementorsOpt = Annotated[int | None, typer.Option("--implementors", metavar="IMPLEMENTORS", help="Concurrent Implementors (default 2).")]
MaxQueriesOpt = Annotated[int | None, typer.Option("--max-queries", metavar="MAX_QUERIES", help="LLM request budget.")]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", metavar="MAX_TOKENS", help="LLM token budget.")]
MaxUsdOpt = Annotated[float | None, typer.Option("--max-usd", metavar="MAX_USD", help="Money budget (USD).")]
MaxGpuSecondsOpt = Annotated[float | None, typer.Option("--max-gpu-seconds", metavar="MAX_GPU_SECONDS", help="Evaluation-time budget (s).")]
MaxWallSecondsOpt = Annotated[float | None, typer.Option("--max-wall-seconds", metavar="MAX_WALL_SECONDS", help="Wall-clock budget of one invocation (s): a deadline; work in flight when it ends is stopped, and a design not evaluated stays pending for `resume`.")]


def agents_over(model: str | None, endpoint: list[str] | None, agent_cmd: str | None = None,
                agent_timeout: float | None = None) -> dict[str, object]:
    """The `[agents]` overrides of --model, --endpoint, --agent-cmd and --agent-timeout."""
    return {"model": model, "endpoints": endpoint or None, "command": {"cmd": agent_cmd, "timeout_s": agent_timeout}}


def fail(console: Console, e: StratagemError, as_json: bool, code: int) -> NoReturn:
    if as_json:
        print(json.dumps({"status": "error", "error": str(e), "error_type": type(e).__name__}))
    else:
        console.print(f"[bold red]error:[/] {escape(str(e))}")
    raise typer.Exit(code)


@contextmanager
def exit_codes(console: Console, as_json: bool,
               usage: tuple[type[StratagemError], ...] = (ConfigError,)) -> Iterator[None]:
    """stratagem's errors inside as the command's exit: 2 for `usage` ones (a configuration, an
    argument), 1 for the others."""
    try:
        yield
    except usage as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)


def wide_console(stderr: bool = False) -> Console:
    """A console that does not fold tables to 80 columns when writing to a file or pipe."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=120)
