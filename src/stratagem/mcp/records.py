"""Owns the MCP tools' results: one pydantic record per tool, and the failure record every
tool returns instead of raising (a missing problem, an unknown run, a bad policy name).

Every result has `ok` and `error`; its other fields are empty when `ok` is false, so a
failure validates against the tool's output schema too. Standard library and pydantic only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FailureKind = Literal["invalid_input", "not_found", "harness_error", "internal"]


class ToolFailure(BaseModel):
    """Why a tool call did not do what it was asked."""

    model_config = ConfigDict(extra="forbid")
    kind: FailureKind
    """`invalid_input`: an argument is wrong (the message names it); `not_found`: no such run
    or design; `harness_error`: the harness or the problem failed; `internal`: a bug in
    stratagem (the message says what was raised)."""
    message: str
    """What went wrong and what to do, naming the input at fault."""
    argument: str | None = None
    """The argument at fault, when one is."""


class ToolResult(BaseModel):
    """What every tool answers."""

    model_config = ConfigDict(extra="forbid")
    ok: bool = True
    """False when the call failed; `error` says why."""
    error: ToolFailure | None = None


class EvaluateResult(ToolResult):
    """`evaluate`: the harness's whole verdict on one candidate."""

    status: str | None = None
    """`valid`, `invalid` or `error` (the verdict's status; a candidate's failure is a verdict,
    not an error of the tool)."""
    verdict: dict[str, Any] | None = None
    """What `stratagem eval --json` prints: every validator's outcome and details, the
    failures, the timings and paired speedup with its interval, seeds, environment, sandbox."""
    recorded_in: str | None = None
    """The run directory the evaluation was recorded in, when one was given."""


class BaselineResult(ToolResult):
    """`baseline`: the reference's timings."""

    baseline: dict[str, Any] | None = None
    """What `stratagem baseline --json` prints: each mode's median and paired ratio."""


class ProcessState(BaseModel):
    """A run this server started in the background (a `stratagem run` process)."""

    model_config = ConfigDict(extra="forbid")
    pid: int
    alive: bool
    exit_code: int | None = None
    """The process's exit code once it ended (0 done, 1 error, 2 usage, 130 stopped)."""
    command: list[str] = Field(default_factory=list)
    log_tail: str = ""
    """The last lines of its standard error (where its failures are said)."""


class RunEntry(BaseModel):
    """One run in `list_runs`."""

    model_config = ConfigDict(extra="forbid")
    run_dir: str
    problem: str | None = None
    domain: str | None = None
    policy: str | None = None
    status: str | None = None
    """`running`, `finished` or `interrupted` (the run database's, as `RunStore.run` sees it: a
    run marked `running` whose process is gone, killed outright, is `interrupted`); `starting`
    before it has one."""
    stop_reason: str | None = None
    iterations: int = 0
    designs: int = 0
    valid: int = 0
    best_speedup: float | None = None
    """The headline's ratio over the reference (`search/headline.py`: the confirmation round's
    when the run confirmed it)."""
    best_confirmed: bool = False
    headline: str = ""
    """The run's result in words, as `show` and the run's last lines say it."""
    process: ProcessState | None = None
    """Set for a run this server started."""


class RunListResult(ToolResult):
    """`list_runs`."""

    runs: list[RunEntry] = Field(default_factory=list)


class ShowRunResult(ToolResult):
    """`show_run`: what `stratagem show --json` prints (docs/show-json.md)."""

    run: dict[str, Any] | None = None


class DesignResult(ToolResult):
    """`show_design`: one design's files, numbers, lineage and, when it failed, why."""

    design: dict[str, Any] | None = None
    files: dict[str, str] | None = None
    """File name -> text."""


class ExportResult(ToolResult):
    """`export_design`: the design's source headed by its provenance."""

    design_id: str | None = None
    text: str | None = None
    """The exported text (also when it was written to `path`)."""
    path: str | None = None


class StartRunResult(ToolResult):
    """`start_run`."""

    run_dir: str | None = None
    process: ProcessState | None = None


class WatchResult(ToolResult):
    """`watch_run`: where a run is, read from its database."""

    run_dir: str | None = None
    status: str | None = None
    """`starting` (no database yet), `running`, `finished`, `interrupted` (also a run marked
    `running` that no process runs any more: killed outright, `stop_reason` says so; the rule
    is `store/liveness.py`'s, as `stratagem show` applies it), or `exited` (this server's
    process ended before it recorded its run: a usage error or a crash; see `process.log_tail`)."""
    done: bool = False
    """The run will change no more (finished, interrupted, or its process ended)."""
    stop_reason: str | None = None
    iterations: int = 0
    designs: int = 0
    valid: int = 0
    best: dict[str, Any] | None = None
    """The best design's numbers, as `show --json` gives them."""
    process: ProcessState | None = None


class StopResult(ToolResult):
    """`stop_run`."""

    run_dir: str | None = None
    signalled: bool = False
    """A signal was sent (Ctrl-C's SIGINT; SIGTERM, then SIGKILL, if it did not end in time)."""
    status: str | None = None
    """The run database's status after the process ended (`interrupted` when stopped cleanly)."""
    process: ProcessState | None = None
