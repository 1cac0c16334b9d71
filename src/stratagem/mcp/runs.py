"""Owns the runs the MCP server starts in the background: each one a `stratagem run ... --json`
process of its own session (Ctrl-C armed in it whatever the server inherited), watched through its run database and stopped the way Ctrl-C stops
it (SIGINT: the run and its iteration marked interrupted, its workers killed; `stratagem
resume RUN_DIR` continues it).

A run is known by its directory. `watch` reads any run directory; `stop` signals only the
runs this server started (it holds their processes). The processes' standard error goes to a
log file per run in a temporary directory of the server's, whose tail `watch` returns.
Closing the manager stops every run still going.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratagem.mcp import inputs
from stratagem.mcp.inputs import ToolInputError
from stratagem.mcp.records import ProcessState, RunEntry, StartRunResult, StopResult, WatchResult

OnProgress = Callable[[float, float | None, str], Awaitable[None]]
"""progress, total (None when unknown), message."""

CTRL_C_ARMED = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from stratagem.cli import run_app; run_app()")
"""`stratagem` with Ctrl-C armed: a process started with SIGINT ignored (a server run in the
background of a shell, under nohup) passes that on to its children, and `stop_run` would
then signal in vain."""

LOG_TAIL_CHARS = 4000
POLL_S = 0.5
HEARTBEAT_S = 10.0
"""`watch_run` reports progress at least this often while it waits, so a client that resets its
timeout on progress keeps waiting."""


@dataclass
class Background:
    """One `stratagem run` process this server started."""

    run_dir: Path
    proc: subprocess.Popen[bytes]
    command: list[str]
    log: Path
    started_at: float = field(default_factory=time.time)

    def state(self) -> ProcessState:
        code = self.proc.poll()
        return ProcessState(pid=self.proc.pid, alive=code is None, exit_code=code, command=self.command,
                            log_tail=_tail(self.log))


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL_CHARS:].decode("utf-8", errors="replace")


@dataclass
class RunOptions:
    """What `start_run` passes on to `stratagem run` (None: the run's default)."""

    policy: str | None = None
    model: str | None = None
    iterations: int | None = None
    patience: int | None = None
    max_queries: int | None = None
    max_wall_seconds: float | None = None
    device: str | None = None
    integrity: str | None = None
    correctness: str | None = None
    config: str | None = None

    def overrides(self) -> dict[str, Any]:
        return {"evaluation": {"device": self.device, "integrity": self.integrity,
                               "correctness": {"mode": self.correctness}},
                "search": {"policy": self.policy, "iterations": self.iterations, "patience": self.patience,
                           "max_queries": self.max_queries,
                           "max_wall_seconds": inputs.positive("max_wall_seconds", self.max_wall_seconds)},
                "agents": {"model": self.model}}

    def argv(self) -> list[str]:
        flags = {"--policy": self.policy, "--model": self.model, "--iterations": self.iterations,
                 "--patience": self.patience, "--max-queries": self.max_queries,
                 "--max-wall-seconds": self.max_wall_seconds, "--device": self.device,
                 "--integrity": self.integrity, "--correctness": self.correctness}
        out = [x for k, v in flags.items() if v is not None for x in (k, str(v))]
        if self.config is not None:
            out += ["--config", str(inputs.config_file(self.config))]
        return out


class RunManager:
    """The background runs of one server."""

    def __init__(self) -> None:
        self._runs: dict[Path, Background] = {}
        self._logs: Path | None = None

    def started(self) -> dict[Path, Background]:
        return dict(self._runs)

    def start(self, problem: str, run_dir: str | None, opts: RunOptions) -> StartRunResult:
        """Check everything `stratagem run` would refuse (problem, options, policy), then start it."""
        from stratagem.domains import load_problem
        from stratagem.errors import ConfigError, ProblemError
        from stratagem.search.api import check_policy, default_run_dir
        from stratagem.store.sqlite import RunStore

        cfg = inputs.config(opts.config, opts.overrides())
        path = inputs.problem_path(problem)
        try:
            loaded = load_problem(path)
        except ProblemError as e:
            raise ToolInputError("problem", f"problem: {e}") from e
        try:
            check_policy(cfg, loaded)
        except ConfigError as e:
            raise ToolInputError("policy" if opts.policy is not None else "model", str(e)) from e
        where = (inputs.run_dir_path(run_dir, must_exist=False) if run_dir is not None
                 else default_run_dir(loaded).resolve())
        if (where / RunStore.DB_NAME).exists():
            raise ToolInputError("run_dir", f"run_dir: {where} already holds a run; give a new directory "
                                            f"(continue that one with `stratagem resume {where}`)")
        mine = self._runs.get(where)
        if mine is not None and mine.proc.poll() is None:
            raise ToolInputError("run_dir", f"run_dir: this server's run in {where} is still going")
        command = [sys.executable, "-c", CTRL_C_ARMED, "run", str(path), "--run-dir", str(where), "--json",
                   *opts.argv()]
        log = self._log_dir() / f"{where.name}-{int(time.time() * 1000)}.log"
        with open(log, "wb") as err:  # the child holds its own descriptor
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        bg = Background(where, proc, command, log)
        self._runs[where] = bg
        return StartRunResult(run_dir=str(where), process=bg.state())

    def _log_dir(self) -> Path:
        if self._logs is None:
            self._logs = Path(tempfile.mkdtemp(prefix="stratagem-mcp-"))
        return self._logs

    def snapshot(self, run_dir: str) -> WatchResult:
        """Where a run is now: its database's status and counts, and its process if ours."""
        from stratagem.mcp.harness import run_entry
        from stratagem.store.sqlite import RunStore

        where = inputs.run_dir_path(run_dir, must_exist=False)
        bg = self._runs.get(where)
        has_db = (where / RunStore.DB_NAME).exists()
        if bg is None and not where.is_dir():
            raise ToolInputError("run_dir", f"run_dir: {where} is not a directory (a run directory made by "
                                            "`stratagem run` or start_run; list_runs lists them)", kind="not_found")
        if bg is None and not has_db:
            raise ToolInputError("run_dir", f"run_dir: {where} holds no run database and no run of this "
                                            "server's writes there", kind="not_found")
        proc = bg.state() if bg is not None else None
        entry = _entry(run_entry, where) if has_db else None
        status = (entry.status if entry is not None else None) or "starting"
        ended = proc is not None and not proc.alive
        if ended and status in ("starting", "running"):
            status = "exited"  # it ended before recording its run (or where no lease is held): a usage error, a crash
        done = ended or (proc is None and status in ("finished", "interrupted"))
        best = _best(where) if entry is not None and entry.valid else None
        return WatchResult(run_dir=str(where), status=status, done=done,
                           stop_reason=entry.stop_reason if entry else None,
                           iterations=entry.iterations if entry else 0, designs=entry.designs if entry else 0,
                           valid=entry.valid if entry else 0, best=best, process=proc)

    async def watch(self, run_dir: str, wait_s: float, on_progress: OnProgress) -> WatchResult:
        """The run's state, after waiting up to `wait_s` for it to end (reporting each change)."""
        if wait_s < 0:
            raise ToolInputError("wait_s", f"wait_s: {wait_s} is negative (0 answers at once)")
        t0 = time.monotonic()
        seen: tuple[Any, ...] | None = None
        said = t0
        while True:
            now = self.snapshot(run_dir)
            t = time.monotonic()
            if now.done or t - t0 >= wait_s:
                return now
            key = (now.status, now.iterations, now.designs, now.valid)
            if key != seen or t - said >= HEARTBEAT_S:  # a change, or a heartbeat while none comes
                seen, said = key, t
                await on_progress(float(now.iterations), _limit(Path(now.run_dir or run_dir)),
                                  f"{now.status}: {now.iterations} iterations, {now.designs} designs, "
                                  f"{now.valid} valid ({t - t0:.0f} s watched)")
            await asyncio.sleep(POLL_S)

    async def stop(self, run_dir: str, grace_s: float, on_progress: OnProgress | None = None) -> StopResult:
        """Ctrl-C for a run this server started: SIGINT, then SIGTERM and SIGKILL if it has not
        ended after `grace_s` each (each signal reported as progress)."""
        if not grace_s > 0:
            raise ToolInputError("grace_s", f"grace_s: {grace_s} is not a positive number of seconds")
        where = inputs.run_dir_path(run_dir, must_exist=False)
        bg = self._runs.get(where)
        if bg is None:
            raise ToolInputError("run_dir", f"run_dir: {where} is not a run this server started (stop it where it "
                                            "runs: Ctrl-C, or `kill -INT PID`)", kind="not_found")
        signalled = False
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if bg.proc.poll() is not None:
                break
            bg.proc.send_signal(sig)
            signalled = True
            if on_progress is not None:
                await on_progress(float(sig), None, f"sent {sig.name} to the run's process {bg.proc.pid}")
            if await _ended(bg.proc, grace_s):
                break
        now = self.snapshot(str(where))
        return StopResult(run_dir=str(where), signalled=signalled, status=now.status, process=bg.state())

    async def aclose(self) -> None:
        """Stop every run still going (SIGINT, then harder), and remove the logs."""
        for bg in self._runs.values():
            if bg.proc.poll() is None:
                bg.proc.send_signal(signal.SIGINT)
        for bg in self._runs.values():
            if not await _ended(bg.proc, 30):
                bg.proc.kill()
                bg.proc.wait()
        if self._logs is not None:
            shutil.rmtree(self._logs, ignore_errors=True)


async def _ended(proc: subprocess.Popen[bytes], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def _entry(read: Callable[[Path], RunEntry], where: Path) -> RunEntry | None:
    """The run's line, or None while its database has no run yet (the process is starting)."""
    from stratagem.errors import StratagemError

    try:
        return read(where)
    except StratagemError:
        return None


def _best(where: Path) -> dict[str, Any] | None:
    """The run's best design as `show --json` gives it (`report/run_json.py`)."""
    from stratagem.report.run_json import design_json
    from stratagem.search.api import show_run

    try:
        r = show_run(where)
        return None if r.best is None else design_json(r.best, r.names)
    except Exception:  # noqa: BLE001 - a view while the run writes; the counts stand without it
        return None


def _limit(where: Path) -> float | None:
    """The run's iteration limit (the progress total), from the configuration it stored."""
    from stratagem.store.sqlite import RunStore

    try:
        with RunStore.read(where) as store:
            run = store.run()
    except Exception:  # noqa: BLE001 - no database yet
        return None
    n = ((run.config if run else {}).get("search") or {}).get("iterations")
    return float(n) if isinstance(n, int) else None
