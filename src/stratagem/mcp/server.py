"""Owns the MCP server: stratagem's harness as tools on the official SDK's `MCPServer`, over
stdio or streamable HTTP on localhost (`stratagem mcp [--http --port N]`, docs/agents.md).

Every tool answers a record of `records` as structured output; a failure is such a record
too, with `ok` false and `error` naming the argument at fault, marked `isError` (never a
traceback). Long calls (evaluate, baseline, watch_run, stop_run) send progress
notifications when the client asks for them (a progress token). The only module that
imports the MCP SDK.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

import stratagem
from stratagem.mcp import harness
from stratagem.mcp.inputs import failure_of
from stratagem.mcp.records import (
    BaselineResult,
    DesignResult,
    EvaluateResult,
    ExportResult,
    RunEntry,
    RunListResult,
    ShowRunResult,
    StartRunResult,
    StopResult,
    ToolResult,
    WatchResult,
)
from stratagem.mcp.runs import RunManager, RunOptions

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
"""A long call with no new stage still reports progress this often (the elapsed time)."""

INSTRUCTIONS = """\
stratagem's harness: it proves a candidate correct, honest and fast against a problem.
A problem is a KernelBench-format .py file (class Model, get_inputs, get_init_inputs) or a
command problem's directory (problem.toml). A candidate is a .py file defining ModelNew, or a
directory of a command design's files (or `files` inline). Call `evaluate` before claiming a
speedup: a verdict `valid` with a speedup interval above 1 is the proof. Searches: start_run,
watch_run (wait_s to wait), stop_run; list_runs, show_run, show_design, export_design.
Relative paths are taken from the server's working directory."""

Device = Annotated[str | None, Field(description="auto (GPU if visible, else CPU), cpu, cuda or cuda:N; default auto.")]
Config = Annotated[str | None, Field(description="A TOML config file (as `stratagem --config`); options given here win.")]
Problem = Annotated[str, Field(description="A KernelBench-format problem .py file, or a command problem's directory (problem.toml).")]
RunDir = Annotated[str, Field(description="A run directory (made by start_run or `stratagem run`).")]
DesignId = Annotated[str | None, Field(description="A design id (a prefix is enough); default: the run's best.")]


async def answer(kind: type[ToolResult], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CallToolResult:
    """Run a tool's body; its record as structured output, or its failure as one (isError)."""
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except Exception as e:  # noqa: BLE001 - every failure becomes a record: the tool never raises
        failure = failure_of(e)
        if failure.kind == "internal":
            log.exception("stratagem mcp: %s failed", getattr(fn, "__name__", "a tool"))
        body = kind(ok=False, error=failure)
        text = f"error ({failure.kind}{', argument ' + failure.argument if failure.argument else ''}): {failure.message}"
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=body.model_dump(mode="json"), is_error=True)
    assert isinstance(result, ToolResult)
    return CallToolResult(content=[TextContent(type="text", text=result.model_dump_json())],
                          structured_content=result.model_dump(mode="json"))


class Progress:
    """Progress notifications of one call: a step per stage the harness names (thread-safe),
    and a heartbeat with the elapsed time between stages."""

    def __init__(self, ctx: Context, what: str) -> None:
        self.ctx, self.what = ctx, what
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.n = 0
        self.t0 = time.monotonic()
        self.stage = "starting"
        self.done = False
        """Set when the call's work ends: the pump stops."""

    def on_stage(self, name: str) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, name)

    async def send(self, message: str) -> None:
        self.n += 1
        await reporter(self.ctx)(self.n, None, message)

    async def pump(self) -> None:
        # ends at `done` as well as at its cancellation, which a heartbeat's send can lose:
        # a pump left running kept its loop alive after the call (and asyncio.run from closing)
        while not self.done:
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can lose the cancellation
                async with asyncio.timeout(HEARTBEAT_S):
                    self.stage = await self.queue.get()
                message = f"{self.what}: {self.stage}"
            except TimeoutError:
                message = f"{self.what}: {self.stage} ({time.monotonic() - self.t0:.0f} s)"
            if not self.done:
                await self.send(message)

    async def around(self, work: Callable[[], Any]) -> Any:
        pump = asyncio.create_task(self.pump())
        try:
            return await work()
        finally:
            self.done = True
            pump.cancel()


def reporter(ctx: Context) -> Callable[[float, float | None, str], Awaitable[None]]:
    """Progress notifications of one call (a client gone away does not fail the call)."""

    async def report(n: float, total: float | None, message: str) -> None:
        try:
            await ctx.report_progress(n, total, message)
        except Exception:  # noqa: BLE001 - delivery is best effort
            log.debug("progress not delivered", exc_info=True)

    return report


def _closing(runs: RunManager) -> Callable[[MCPServer[Any]], AbstractAsyncContextManager[None]]:
    """A server lifespan that stops the runs it started when it closes."""

    @asynccontextmanager
    async def lifespan(_app: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await runs.aclose()

    return lifespan


def build_server(manager: RunManager | None = None) -> MCPServer[Any]:
    """The server with every tool; its lifespan stops the runs it started when it closes."""
    runs = manager or RunManager()
    server: MCPServer[Any] = MCPServer("stratagem", instructions=INSTRUCTIONS, version=stratagem.__version__,
                                       log_level="WARNING", lifespan=_closing(runs))
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(description="Evaluate one candidate against one problem through the whole harness (static "
                             "checks, build/load, correctness on hidden inputs, integrity, timing paired with "
                             "the reference, roofline): `stratagem eval`'s verdict as structured output. A "
                             "candidate that fails is a verdict (status invalid), not an error. Takes seconds "
                             "to minutes; reports each stage as progress.")
    async def evaluate(
        problem: Problem,
        ctx: Context,
        candidate: Annotated[str | None, Field(description="The candidate: a .py file (PyTorch) or a directory of a command design's files.")] = None,
        files: Annotated[dict[str, str] | None, Field(description="The candidate inline instead: file name -> text (PyTorch: {'candidate.py': source}).")] = None,
        device: Device = None,
        timeout_s: Annotated[float | None, Field(description="Limit in seconds on the evaluation (default: the harness's).")] = None,
        integrity: Annotated[str | None, Field(description="lenient (default) or strict (the heavy work must run in the candidate's own kernels).")] = None,
        correctness: Annotated[str | None, Field(description="fixed (default) or calibrated (PyTorch).")] = None,
        run_dir: Annotated[str | None, Field(description="Record the evaluation in this run directory.")] = None,
        config: Config = None,
    ) -> Annotated[CallToolResult, EvaluateResult]:
        progress = Progress(ctx, "evaluate")
        return await answer(EvaluateResult, progress.around, lambda: harness.evaluate(
            problem, candidate, files, device=device, timeout_s=timeout_s, integrity=integrity,
            correctness=correctness, run_dir=run_dir, config=config, on_stage=progress.on_stage))

    @server.tool(description="Time the problem's reference (PyTorch: eager and torch.compile, plus max-autotune "
                             "on a GPU), from the cache unless refresh: `stratagem baseline --json`. A command "
                             "problem's reference is timed beside each design instead (status not_measured; "
                             "see evaluate's speedup).")
    async def baseline(
        problem: Problem, ctx: Context,
        refresh: Annotated[bool, Field(description="Measure again even if cached.")] = False,
        device: Device = None, config: Config = None,
    ) -> Annotated[CallToolResult, BaselineResult]:
        progress = Progress(ctx, "baseline")
        return await answer(BaselineResult, progress.around,
                            lambda: harness.baseline(problem, refresh=refresh, device=device, config=config))

    @server.tool(description="List run directories under root (newest first) with status, counts and best "
                             "speedup, and the runs this server started.", annotations=read_only)
    async def list_runs(
        root: Annotated[str | None, Field(description="Where to look (default ./runs; a suite's runs one level down are found too).")] = None,
        limit: Annotated[int, Field(description="At most this many runs.", ge=1, le=1000)] = 50,
    ) -> Annotated[CallToolResult, RunListResult]:
        return await answer(RunListResult, _list_runs, runs, root, limit)

    @server.tool(description="Show a run: `stratagem show --json` (every design, why each failed, the "
                             "iterations, the spend; docs/show-json.md). Works while the run goes on.",
                 annotations=read_only)
    async def show_run(run_dir: RunDir) -> Annotated[CallToolResult, ShowRunResult]:
        return await answer(ShowRunResult, harness.show_run, run_dir)

    @server.tool(description="Show one design of a run: its files, numbers, lineage, and why it failed.",
                 annotations=read_only)
    async def show_design(run_dir: RunDir, design: DesignId = None) -> Annotated[CallToolResult, DesignResult]:
        return await answer(DesignResult, harness.show_design, run_dir, design)

    @server.tool(description="Export a design (default the best): its source headed by its provenance (problem, "
                             "run, paired speedups, device), as `stratagem export`; written to out when given.")
    async def export_design(
        run_dir: RunDir, design: DesignId = None,
        out: Annotated[str | None, Field(description="Write the exported file here too.")] = None,
    ) -> Annotated[CallToolResult, ExportResult]:
        return await answer(ExportResult, harness.export_design, run_dir, design, out)

    @server.tool(description="Start a search run in the background (a `stratagem run` process): returns its "
                             "run directory at once; follow it with watch_run, end it with stop_run. Without "
                             "a model the problem's model-free policy runs (recipes for PyTorch).")
    async def start_run(
        problem: Problem,
        policy: Annotated[str | None, Field(description="auto, pike-b, pike-o (need a model), recipes, tune, or a domain's own.")] = None,
        model: Annotated[str | None, Field(description="The LLM, as `stratagem run --model` takes it.")] = None,
        iterations: Annotated[int | None, Field(description="Iterations (default 10).")] = None,
        patience: Annotated[int | None, Field(description="Stop after this many iterations without a new best.")] = None,
        max_queries: Annotated[int | None, Field(description="LLM request budget.")] = None,
        max_wall_seconds: Annotated[float | None, Field(description="Wall-clock budget (s): a deadline; what is in flight when it ends is stopped.")] = None,
        device: Device = None,
        integrity: Annotated[str | None, Field(description="lenient or strict.")] = None,
        correctness: Annotated[str | None, Field(description="fixed or calibrated.")] = None,
        run_dir: Annotated[str | None, Field(description="A new run directory (default runs/PROBLEM-TIMESTAMP).")] = None,
        config: Config = None,
    ) -> Annotated[CallToolResult, StartRunResult]:
        opts = RunOptions(policy=policy, model=model, iterations=iterations, patience=patience,
                          max_queries=max_queries, max_wall_seconds=max_wall_seconds, device=device,
                          integrity=integrity, correctness=correctness, config=config)
        return await answer(StartRunResult, runs.start, problem, run_dir, opts)

    @server.tool(description="Where a run is, read from its database: status, iterations, designs, valid, the "
                             "best so far, and (for a run this server started) its process and log tail. With "
                             "wait_s, waits up to that long for the run to end, reporting progress.",
                 annotations=read_only)
    async def watch_run(
        run_dir: RunDir, ctx: Context,
        wait_s: Annotated[float, Field(description="Wait up to this long for the run to end (0: answer at once).", ge=0, le=3600)] = 0,
    ) -> Annotated[CallToolResult, WatchResult]:
        return await answer(WatchResult, runs.watch, run_dir, wait_s, reporter(ctx))

    @server.tool(description="Stop a run this server started, the way Ctrl-C does: the run and its iteration "
                             "marked interrupted, workers killed (`stratagem resume RUN_DIR` continues it).")
    async def stop_run(
        run_dir: RunDir, ctx: Context,
        grace_s: Annotated[float, Field(description="Seconds to wait for a clean stop before a harder signal.", gt=0, le=600)] = 60,
    ) -> Annotated[CallToolResult, StopResult]:
        return await answer(StopResult, runs.stop, run_dir, grace_s, reporter(ctx))

    return server


def _list_runs(runs: RunManager, root: str | None, limit: int) -> RunListResult:
    from stratagem.mcp.harness import find_runs, run_entry
    from stratagem.store.sqlite import RunStore

    found = find_runs(root, limit) if root is not None else (find_runs("runs", limit) if Path("runs").is_dir() else [])
    mine = runs.started()
    entries = []
    for where in dict.fromkeys([*mine, *found]):  # this server's first, then the newest
        bg = mine.get(where)
        if (where / RunStore.DB_NAME).exists():
            try:
                entry = run_entry(where)
            except Exception as e:  # noqa: BLE001 - one unreadable run does not hide the others
                entry = RunEntry(run_dir=str(where), status=f"unreadable: {e}")
        else:
            entry = RunEntry(run_dir=str(where), status="starting")
        entries.append(entry.model_copy(update={"process": bg.state() if bg else None}))
    return RunListResult(runs=entries[:limit])


Transport = Literal["stdio", "streamable-http"]


def serve(transport: Transport = "stdio", host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until the client closes stdio (or, over HTTP, until interrupted)."""
    server = build_server()
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
