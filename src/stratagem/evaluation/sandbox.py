"""Owns running one worker process in isolation and collecting what it left behind.

What the sandbox does:
- starts `python -m stratagem.evaluation.worker` in a fresh process, in its own session and
  process group, with its own temporary directory (also its HOME and TMPDIR);
- gives it a scrubbed environment: an allowlist of variables (PATH, locale, CUDA/compiler
  settings), minus anything whose name looks like a secret (KEY, TOKEN, SECRET, PASSWORD...);
- points the compile caches the request's domain names (`EvalRequest.caches`) at the
  executor slot's directory, so they persist across candidates without being shared between
  concurrent workers, and keeps the variables its worker needs (`EvalRequest.keep_env`);
- puts it in a private network namespace (`unshare --net`) where the OS allows it, so it has
  no network at all; where not, it says so in the result (`network_isolated=False`);
- sets rlimits: no core dumps, and an address-space cap for CPU workers when configured;
- enforces a hard wall-clock timeout by killing the whole process group (SIGKILL), and after
  every run kills the group again plus any process that still carries this run's marker in
  its environment (grandchildren that called `setsid`);
- captures stdout and stderr to files and keeps their tails; reads the response only if it is
  a regular file under the size limit.

What it does not protect against: a candidate reading files the user can read (it runs as the
same user, without a filesystem jail), exhausting GPU memory of other processes on the same
device, descendants that both leave the process group and clear their environment, or code
that tampers with the harness inside its own process (the integrity validators' job). Run it
inside a container or VM for hostile code beyond LLM-written kernels.

This module runs the processes and kills one at the first limit it runs past; charging its
time to its phases, each with its limit, is `phases.py`'s (`PhaseClock`); what sets a process
apart (environment, namespace, rlimits, the kills) is `isolation.py`'s, and reading what it
left behind is `leftovers.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratagem.evaluation.isolation import (
    _kill_group,
    _kill_marked,
    _preexec,
    _unshare_prefix,
    build_env,
    for_request,
)
from stratagem.evaluation.leftovers import _read_progress, _read_response, _tail
from stratagem.evaluation.phases import JUDGE_START, PhaseClock


@dataclass(frozen=True)
class SandboxSettings:
    """Limits and environment for one worker run."""

    timeout_s: float
    """Wall-clock limit of the run (after the compile stage, if `compile_stage` is set)."""
    base_env: Mapping[str, str]
    """The parent's environment (from `config.environment()`), before scrubbing."""
    slot_env: Mapping[str, str] = field(default_factory=dict)
    """Variables the executor slot pins (CUDA_VISIBLE_DEVICES, the shared build cache)."""
    cache_dir: Path | None = None
    """The slot's folder of compile caches (per host and device): the request's domain names
    the caches its worker keeps there (`EvalRequest.caches`); None: none are set."""
    keep_env: tuple[str, ...] = ()
    """Variables of `base_env` the request's domain adds to the allowlist (set from the request)."""
    network: str = "deny"
    memory_limit_bytes: int | None = None
    max_response_bytes: int = 8 * 1024 * 1024
    tmp_root: Path | None = None
    compile_stage: str | None = None
    """The worker's build stage (e.g. `load`); set with `compile_timeout_s`, it gives compiles
    their own limit (`PhaseClock`: what counts as compiling)."""
    compile_timeout_s: float | None = None
    """The compile budget: the process's start up to its first stage, every `compile` phase the
    worker reports (torch.compile compiling), and all time a compiler process runs in its
    session. None: compiles count as run time."""
    lock_wait_timeout_s: float = 3600.0
    """The limit on time spent in `wait` phases (waiting for the device lock), which count
    against neither other limit."""
    on_event: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)
    """Called with each progress event of the worker as it arrives (stage starts and ends,
    phases): the live view's window into a running evaluation."""


@dataclass(frozen=True)
class SandboxResult:
    """What one worker run left behind, as plain data."""

    response_text: str | None
    """The response file's text, or `None` if missing, oversized or not a regular file."""
    response_problem: str | None
    """Why the response is missing or was refused."""
    progress: list[dict[str, Any]]
    """The worker's stage events, in order (`start`, `end` with a result, `done`)."""
    returncode: int | None
    signal_name: str | None
    """The signal that ended the worker, if any (`SIGSEGV`, `SIGKILL`)."""
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    network_isolated: bool
    strays_killed: int
    """Processes outside the group that still carried this run's marker and were killed."""
    limit_hit: str | None = None
    """Which limit killed it: `compile`, `run` or `lock_wait` (None: none did)."""
    phase_s: dict[str, float] = field(default_factory=dict)
    """Seconds charged to each phase (`compile`, `run`, `wait`)."""
    judge: JudgeRun | None = None
    """The judge's run, when the request asked for one and the worker said every stage passed."""
    lost: str | None = None
    """Why the executor lost the worker with its host (a Ray runner that died at every
    attempt): not the candidate's doing. None: the worker ran."""
    answered: dict[str, Any] | None = None
    """The request the worker answered, where the executor took the answer to an earlier
    request asking the same (a resumed run's request found in the queue: its id and seeds,
    not the new request's, are the ones the results carry). None: the request given."""
    ahead: bool = False
    """The worker was started ahead of the request (`start_ahead`): its start, imports and
    warm-up were not on this run's clock."""


@dataclass(frozen=True)
class JudgeRun:
    """What the judge process left behind (evaluation/judge.py)."""

    response_text: str | None
    response_problem: str | None
    returncode: int | None
    signal_name: str | None
    timed_out: bool
    duration_s: float
    stderr_tail: str
    wait_s: float = 0.0
    """Of `duration_s`, the time spent waiting for the worker (and for the device lock)."""
    nonce: str = ""
    """The nonce the parent wrote into the go file (its answer must carry it)."""
    after_worker_s: float = 0.0
    """Seconds from the go file to the judge's end: what the judge adds to an evaluation."""


async def run_worker(request_json: str, settings: SandboxSettings, ahead: Ahead | None = None) -> SandboxResult:
    """Run one worker on `request_json` under `settings` (in `ahead`, a worker started ahead
    for a request of its key, when given and still alive; else in a process started now);
    when the request asks for a judge, the judge runs beside it, and is told to judge (a go
    file with a fresh nonce) only after the worker and its strays are gone and its response
    says every stage passed; never raises for candidate failures."""
    settings = for_request(settings, request_json)
    if ahead is not None:
        try:
            given = ahead.key == ahead_key(request_json, settings) and await _hand_over(ahead, request_json)
        except BaseException:
            ahead.kill()
            raise
        if not given:  # another kind of request, or it ended while it waited: a fresh process instead
            ahead.kill()
            ahead = None
    marker = ahead.marker if ahead is not None else uuid.uuid4().hex
    workdir = ahead.workdir if ahead is not None else Path(tempfile.mkdtemp(prefix="stratagem-", dir=settings.tmp_root))
    judge: asyncio.Task[JudgeRun] | None = None
    jdir: Path | None = None
    try:
        if _asks_judge(request_json):
            jdir = Path(tempfile.mkdtemp(prefix="stratagem-judge-", dir=settings.tmp_root))
            judge = asyncio.create_task(_judge(request_json, workdir / ".stratagem" / "record", jdir, settings))
        result = await _run(request_json, settings, workdir, marker, ahead)
        if judge is not None and jdir is not None:
            if _all_passed(result):
                nonce = uuid.uuid4().hex
                go = jdir / ".stratagem" / "go.json"
                tmp = go.with_suffix(".tmp")
                tmp.write_text(json.dumps({"nonce": nonce, "claims": json.loads(result.response_text or "{}")}),
                               encoding="utf-8")
                os.replace(tmp, go)
                t_go = time.monotonic()
                judged = await judge
                result = dataclasses.replace(result, judge=dataclasses.replace(
                    judged, nonce=nonce, after_worker_s=time.monotonic() - t_go))
            else:
                await reap(judge)
        return result
    finally:
        if judge is not None and not judge.done():
            await reap(judge)
        _kill_marked(marker)
        shutil.rmtree(workdir, ignore_errors=True)
        if jdir is not None:
            shutil.rmtree(jdir, ignore_errors=True)


async def reap(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait for its end, its outcome dropped, without swallowing a
    cancellation of the caller's own: `suppress(CancelledError): await task` also ate the
    Ctrl-C that cancelled the run while it waited here, and the run went on to exit 0."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def reraise_lost_cancel() -> None:
    """Raise CancelledError when the current task was cancelled (Ctrl-C cancels the run's main
    task) and something it awaited swallowed that (3.11's asyncio can leave one pending behind a
    TimeoutError): without this the run went on and exited 0 as if never interrupted. A
    cancellation handled where it was asked for (`asyncio.timeout`'s own, a TaskGroup's) is
    uncancelled there and does not count."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _asks_judge(request_json: str) -> bool:
    try:
        return bool(json.loads(request_json).get("judge"))
    except (ValueError, AttributeError):
        return False


def _all_passed(result: SandboxResult) -> bool:
    if result.response_text is None or result.timed_out:
        return False
    try:
        return all(r.get("outcome") == "passed" for r in json.loads(result.response_text)["results"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return False  # an unreadable response fails on its own


async def _judge(request_json: str, record_dir: Path, jdir: Path, settings: SandboxSettings) -> JudgeRun:
    """The judge in `jdir`, a directory of its own (`python -P`: nothing of the working
    directory is importable), with the worker's limits and environment; its wait for the go
    file counts as a lock wait, whose limit covers the worker's whole allowance."""
    marker = uuid.uuid4().hex
    try:
        io_dir = jdir / ".stratagem"
        io_dir.mkdir()
        req, go, resp = io_dir / "request.json", io_dir / "go.json", io_dir / "response.json"
        req.write_text(request_json, encoding="utf-8")
        allowance = settings.lock_wait_timeout_s + settings.timeout_s + (settings.compile_timeout_s or 0.0)
        # its start (imports, the problem's load) is charged to the compile limit, as the
        # worker's is; its checks to the run limit; its wait for the worker to neither
        jsettings = dataclasses.replace(settings, compile_stage=JUDGE_START if settings.compile_timeout_s else None,
                                        lock_wait_timeout_s=allowance, on_event=None)
        run = await _exec(["-P", "-m", "stratagem.evaluation.judge", str(req), str(go), str(record_dir), str(resp)],
                          jsettings, jdir, marker)
        text, problem = _read_response(resp, settings.max_response_bytes)
        return JudgeRun(response_text=text, response_problem=problem, returncode=run.returncode,
                        signal_name=run.signal_name, timed_out=run.timed_out, duration_s=run.duration_s,
                        stderr_tail=_tail(io_dir / "stderr.txt"), wait_s=run.clock.totals().get("wait", 0.0))
    finally:
        _kill_marked(marker)


@dataclass
class _Exec:
    returncode: int | None
    signal_name: str | None
    timed_out: bool
    duration_s: float
    network_isolated: bool
    strays_killed: int
    clock: PhaseClock


async def _spawn(args: list[str], settings: SandboxSettings, workdir: Path, marker: str,
                 ahead: tuple[int, ...] | None = None) -> tuple[asyncio.subprocess.Process, bool]:
    """Start `python ARGS... PROGRESS` in `workdir` under `settings` (its stdout and stderr in
    `workdir/.stratagem/`); whether it has a network namespace of its own. `ahead` (a worker
    started ahead, `start_ahead`): its stdin is a pipe it waits on, and it keeps off those cores."""
    io_dir = workdir / ".stratagem"
    cmd: list[str] = [sys.executable, *args, str(io_dir / "progress.jsonl")]
    prefix = _unshare_prefix() if settings.network == "deny" else None
    if prefix:
        cmd = [*prefix, *cmd]
    env = build_env(settings, workdir, marker)
    with open(io_dir / "stdout.txt", "wb") as out, open(io_dir / "stderr.txt", "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL if ahead is None else subprocess.PIPE,
            stdout=out, stderr=err, start_new_session=True,
            preexec_fn=functools.partial(_preexec, settings.memory_limit_bytes, ahead or ()),
        )
    return proc, prefix is not None


async def _exec(args: list[str], settings: SandboxSettings, workdir: Path, marker: str) -> _Exec:
    """Run `python ARGS... PROGRESS` in `workdir` under `settings` (`_spawn`, `_supervise`)."""
    t0 = time.monotonic()
    proc, isolated = await _spawn(args, settings, workdir, marker)
    return await _supervise(proc, settings, workdir, marker, isolated, t0)


async def _supervise(proc: asyncio.subprocess.Process, settings: SandboxSettings, workdir: Path, marker: str,
                     isolated: bool, t0: float) -> _Exec:
    """Wait for a started process, killing its group at the first limit it runs past (its
    phases charged from now on), then its strays."""
    clock = PhaseClock(settings, workdir / ".stratagem" / "progress.jsonl", session=proc.pid)
    timed_out = False
    try:
        timed_out = await _wait(proc, clock)
        clock.poll()  # the events written just before it ended (`done`)
        if timed_out:
            _kill_group(proc.pid)
            await proc.wait()
    except asyncio.CancelledError:
        _kill_group(proc.pid)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    finally:
        _kill_group(proc.pid)  # leftovers in the group
    duration = time.monotonic() - t0
    strays = _kill_marked(marker)
    rc = proc.returncode
    sig = _signal_name(-rc) if rc is not None and rc < 0 else None
    return _Exec(rc, sig, timed_out, duration, isolated, strays, clock)


@dataclass
class Ahead:
    """A worker started ahead of its request (`start_ahead`): its process has imported its
    domain's worker module (and warmed it: on a GPU, the CUDA context) and waits on its stdin
    for the word to read the request in its folder. It serves one request, then exits."""

    key: str
    """What its environment was made from (`ahead_key`): only a request with the same key may take it."""
    proc: asyncio.subprocess.Process
    workdir: Path
    marker: str
    isolated: bool
    started_at: float = field(default_factory=time.monotonic)

    def kill(self) -> None:
        """End it (its group and every process carrying its marker) and remove its folder."""
        if self.proc.stdin is not None:
            with contextlib.suppress(RuntimeError):  # its event loop has closed: the pipe went with it
                self.proc.stdin.close()
        _kill_group(self.proc.pid)
        _kill_marked(self.marker)
        shutil.rmtree(self.workdir, ignore_errors=True)


def ahead_key(request_json: str, settings: SandboxSettings) -> str:
    """What a worker's process is made from before its request is read: the request's worker
    module and the environment, limits and namespace `settings` give a request like it. A
    worker started ahead serves a request of the same key only."""
    try:
        module = str(json.loads(request_json).get("worker_module") or "")
    except (ValueError, AttributeError):
        module = ""
    s = for_request(settings, request_json)
    return json.dumps([module, sorted(s.slot_env.items()), sorted(s.keep_env), s.network, s.memory_limit_bytes,
                       str(s.tmp_root or ""), sorted(s.base_env.items())])


async def start_ahead(request_json: str, settings: SandboxSettings, device: str, lock_path: str | None,
                      avoid_cores: tuple[int, ...] = ()) -> Ahead:
    """Start a worker for a request like `request_json` before it comes (`Ahead`): it imports
    the request's worker module and warms it on `device` (the module's `start_ahead`, where it
    has one), on the CPU under `lock_path`'s shared hold (never beside a timed section), off
    `avoid_cores` (the machine's timing cores)."""
    module = str(json.loads(request_json).get("worker_module") or "")
    key = ahead_key(request_json, settings)
    settings = for_request(settings, request_json)
    marker = uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="stratagem-", dir=settings.tmp_root))
    io_dir = workdir / ".stratagem"
    io_dir.mkdir()
    try:
        proc, isolated = await _spawn(
            ["-m", "stratagem.evaluation.worker", "--ahead", module, device, lock_path or "-",
             str(io_dir / "request.json"), str(io_dir / "response.json")],
            settings, workdir, marker, ahead=avoid_cores)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Ahead(key, proc, workdir, marker, isolated)


async def _hand_over(ahead: Ahead, request_json: str) -> bool:
    """Give `ahead` its request: written to its folder, then the word on its stdin. False
    (nothing given) when it has ended."""
    stdin = ahead.proc.stdin
    if ahead.proc.returncode is not None or stdin is None:
        return False
    (ahead.workdir / ".stratagem" / "request.json").write_text(request_json, encoding="utf-8")
    try:
        stdin.write(b"go\n")
        await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


async def _run(request_json: str, settings: SandboxSettings, workdir: Path, marker: str,
               ahead: Ahead | None = None) -> SandboxResult:
    io_dir = workdir / ".stratagem"
    req, resp, prog = io_dir / "request.json", io_dir / "response.json", io_dir / "progress.jsonl"
    if ahead is not None:  # started ahead: its phases and limits count from now on
        t0 = time.monotonic()
        run = await _supervise(ahead.proc, settings, workdir, marker, ahead.isolated, t0)
    else:
        io_dir.mkdir()
        req.write_text(request_json, encoding="utf-8")
        run = await _exec(["-m", "stratagem.evaluation.worker", str(req), str(resp)], settings, workdir, marker)
    text, problem = _read_response(resp, settings.max_response_bytes)
    return SandboxResult(
        response_text=text,
        response_problem=problem,
        progress=_read_progress(prog, max(2 * settings.max_response_bytes, 1 << 20)),
        returncode=run.returncode,
        signal_name=run.signal_name,
        timed_out=run.timed_out,
        duration_s=run.duration_s,
        stdout_tail=_tail(io_dir / "stdout.txt"),
        stderr_tail=_tail(io_dir / "stderr.txt"),
        network_isolated=run.network_isolated,
        strays_killed=run.strays_killed,
        limit_hit=run.clock.limit_hit,
        phase_s=run.clock.totals(),
        ahead=ahead is not None,
    )


async def _wait(proc: asyncio.subprocess.Process, clock: PhaseClock) -> bool:
    """Wait for the worker; True if it ran past a limit (and must be killed)."""
    while True:
        clock.poll()
        clock.look()
        remaining = clock.remaining_s()
        if remaining <= 0:
            return True
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can lose the caller's own cancellation
            async with asyncio.timeout(min(remaining, 0.25)):
                await proc.wait()
            return False
        except TimeoutError:
            reraise_lost_cancel()  # a Ctrl-C that came as the poll timed out


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
