"""Owns checking the MCP tools' arguments: each check raises `ToolInputError` naming the
argument at fault, and `failure_of` turns any exception a tool meets into a `ToolFailure`
(never a traceback: a bug is named by its type and message).

Relative paths are taken from the server's working directory (where the coding agent
started it), and said back resolved.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stratagem.config import StratagemConfig, load_config
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.errors import CandidateError, ConfigError, ProblemError, StoreError, StratagemError
from stratagem.mcp.records import FailureKind, ToolFailure


class ToolInputError(Exception):
    """An argument a tool cannot use."""

    def __init__(self, argument: str | None, message: str, kind: FailureKind = "invalid_input") -> None:
        super().__init__(message)
        self.argument = argument
        self.kind: FailureKind = kind


def failure_of(e: BaseException, argument: str | None = None) -> ToolFailure:
    """The failure record of an exception met by a tool (`argument`: the one it came from,
    when the caller knows)."""
    if isinstance(e, ToolInputError):
        return ToolFailure(kind=e.kind, message=str(e), argument=e.argument or argument)
    if isinstance(e, ConfigError | ProblemError | CandidateError):
        return ToolFailure(kind="invalid_input", message=str(e), argument=argument or _option_of(str(e)))
    if isinstance(e, StoreError):
        return ToolFailure(kind="not_found", message=str(e), argument=argument)
    if isinstance(e, StratagemError):
        return ToolFailure(kind="harness_error", message=str(e), argument=argument)
    return ToolFailure(kind="internal", message=f"stratagem raised {type(e).__name__}: {e}", argument=argument)


def problem_path(value: str) -> Path:
    """A problem: a KernelBench-format `.py` file, or a command problem's directory (holding
    `problem.toml`)."""
    p = Path(value).expanduser().resolve() if value.strip() else None
    if p is None:
        raise ToolInputError("problem", "problem: give a path (a KernelBench-format .py file, or a directory with problem.toml)")
    if not p.exists():
        raise ToolInputError("problem", f"problem: {p} does not exist (give a KernelBench-format .py file, or a "
                                        "command problem's directory holding problem.toml)")
    if p.is_dir() and not (p / "problem.toml").is_file():
        raise ToolInputError("problem", f"problem: the directory {p} holds no problem.toml (docs/command.md); "
                                        "a PyTorch problem is a .py file")
    return p


def candidate_design(candidate: str | None, files: dict[str, str] | None, problem: Problem) -> Design:
    """The design to evaluate: at a path (a file: the problem's main file, whatever its name; a
    directory: a design's files, hidden ones left out: `evaluation.api.read_design`) or
    `files` given inline."""
    if (candidate is None) == (files is None):
        raise ToolInputError("candidate", "give either candidate (a path) or files (name -> text), not both or neither")
    if files is not None:
        return Design(files=_inline_files(files), provenance={"source": "mcp", "path": "inline"})
    assert candidate is not None
    if not candidate.strip():
        raise ToolInputError("candidate", "candidate: give a path (a .py file, or a directory of a design's files)")
    p = Path(candidate).expanduser().resolve()
    if not p.exists():
        raise ToolInputError("candidate", f"candidate: {p} does not exist")
    from stratagem.evaluation.api import read_design

    try:
        design = read_design(p, problem)
    except CandidateError as e:
        raise ToolInputError("candidate", f"candidate: {e}") from e
    return Design(files=design.files, provenance={"source": "mcp", "path": str(p)})


def _inline_files(files: dict[str, str]) -> dict[str, str]:
    if not files:
        raise ToolInputError("files", "files: give at least one file (name -> text)")
    for name in files:
        if not name or name.startswith("/") or ".." in Path(name).parts:
            raise ToolInputError("files", f"files: {name!r} is not a relative file name inside the design")
    return dict(files)


def config_file(value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser().resolve()
    if not p.is_file():
        raise ToolInputError("config", f"config: {p} is not a file (a TOML config, as `stratagem --config` takes)")
    return p


def positive(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ToolInputError(name, f"{name}: {value} is not a positive number")
    return value


def config(path: str | None, overrides: dict[str, Any]) -> StratagemConfig:
    """The configuration from a TOML file and the tool's options (the command line's
    precedence: defaults < file < options). A bad value names the option."""
    try:
        return load_config(config_file(path), overrides)
    except ConfigError as e:
        raise ToolInputError(_option_of(str(e)), str(e)) from e


def _option_of(message: str) -> str | None:
    """The tool argument a config error names (its message says `(--device)`: device)."""
    m = re.search(r"\(--([a-z][a-z-]*)\)", message)
    if m is None:
        return None
    name = m.group(1).replace("-", "_")
    return {"timeout": "timeout_s"}.get(name, name)


def run_dir_path(value: str, *, must_exist: bool = True) -> Path:
    """A run directory (made by `stratagem run` or `start_run`)."""
    if not value.strip():
        raise ToolInputError("run_dir", "run_dir: give a run directory")
    p = Path(value).expanduser().resolve()
    if must_exist and not p.is_dir():
        raise ToolInputError("run_dir", f"run_dir: {p} is not a directory (a run directory made by `stratagem run` "
                                        "or start_run; list_runs lists them)", kind="not_found")
    return p
