"""Owns running one worker process in isolation and collecting what it left behind.

What the sandbox does:
- starts `python -m stratagem.evaluation.worker` in a fresh process, in its own session and
  process group, with its own temporary directory (also its HOME and TMPDIR);
- gives it a scrubbed environment: an allowlist of variables (PATH, locale, CUDA/compiler
  settings), minus anything whose name looks like a secret (KEY, TOKEN, SECRET, PASSWORD...);
- points the compile caches (`TORCH_EXTENSIONS_DIR`, `TRITON_CACHE_DIR`,
  `TORCHINDUCTOR_CACHE_DIR`) at the executor slot's directory, so they persist across
  candidates without being shared between concurrent workers;
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
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stratagem

MARKER_VAR = "STRATAGEM_SANDBOX_ID"
TAIL_CHARS = 6000

_ALLOW_EXACT = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX",
})
_ALLOW_PREFIX = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "CUDNN_", "TRITON_", "TORCHINDUCTOR_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)


def scrub_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted, secret-free part of an environment."""
    out = {}
    for k, v in env.items():
        if _SECRET.search(k):
            continue
        if k in _ALLOW_EXACT or k.startswith(_ALLOW_PREFIX):
            out[k] = v
    return out


@dataclass(frozen=True)
class SandboxSettings:
    """Limits and environment for one worker run."""

    timeout_s: float
    """Wall-clock limit of the run (after the compile stage, if `compile_stage` is set)."""
    base_env: Mapping[str, str]
    """The parent's environment (from `config.environment()`), before scrubbing."""
    slot_env: Mapping[str, str] = field(default_factory=dict)
    """Variables the executor slot pins (CUDA_VISIBLE_DEVICES, cache dirs)."""
    network: str = "deny"
    memory_limit_bytes: int | None = None
    max_response_bytes: int = 8 * 1024 * 1024
    tmp_root: Path | None = None
    compile_stage: str | None = None
    """A stage (e.g. `load`) with its own limit: `compile_timeout_s` runs until the worker
    reports it ended, then `timeout_s` starts for the rest."""
    compile_timeout_s: float | None = None


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


@functools.cache
def _unshare_prefix() -> tuple[str, ...] | None:
    """The command prefix that gives a private network namespace here, or None."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for prefix in ((exe, "--net"), (exe, "--net", "--map-root-user")):
        try:
            r = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            return prefix
    return None


def _package_root() -> str:
    return str(Path(stratagem.__file__).resolve().parent.parent)


def _tail(path: Path) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            fh.seek(max(0, size - TAIL_CHARS * 2))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return text[-TAIL_CHARS:]


def _read_progress(path: Path, limit: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh.read(limit).splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    obj = json.loads(line)
                    if isinstance(obj, dict):
                        events.append(obj)
    except OSError:
        pass
    return events


def _read_response(path: Path, limit: int) -> tuple[str | None, str | None]:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, "the worker wrote no response"
    if not path.is_file() or path.is_symlink():
        return None, "the response is not a regular file"
    if st.st_size > limit:
        return None, f"the response is {st.st_size} bytes, over the {limit}-byte limit"
    try:
        return path.read_text(encoding="utf-8"), None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"the response is unreadable: {e}"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _kill_marked(marker: str) -> int:
    """Kill every process whose environment carries `MARKER_VAR=marker`; return how many."""
    needle = f"{MARKER_VAR}={marker}".encode()
    killed = 0
    me = os.getpid()
    for _ in range(3):
        found = 0
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    env = fh.read()
            except OSError:
                continue
            if needle in env.split(b"\0"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry), signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
        time.sleep(0.05)
    return killed


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the process that started it dies (a search killed
    with `kill -9` leaves no worker running on the GPU). Elsewhere: nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _preexec(memory_limit: int | None) -> None:
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))


def build_env(settings: SandboxSettings, workdir: Path, marker: str) -> dict[str, str]:
    env = scrub_environment(settings.base_env)
    env.update(settings.slot_env)
    env.update(
        HOME=str(workdir),
        TMPDIR=str(workdir),
        PYTHONPATH=_package_root(),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
    )
    env[MARKER_VAR] = marker
    env.setdefault("PATH", os.defpath)
    return env


async def run_worker(request_json: str, settings: SandboxSettings) -> SandboxResult:
    """Run one worker on `request_json` under `settings`; never raises for candidate failures."""
    marker = uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="stratagem-", dir=settings.tmp_root))
    try:
        return await _run(request_json, settings, workdir, marker)
    finally:
        _kill_marked(marker)
        shutil.rmtree(workdir, ignore_errors=True)


async def _run(request_json: str, settings: SandboxSettings, workdir: Path, marker: str) -> SandboxResult:
    io_dir = workdir / ".stratagem"
    io_dir.mkdir()
    req, resp, prog = io_dir / "request.json", io_dir / "response.json", io_dir / "progress.jsonl"
    req.write_text(request_json, encoding="utf-8")
    out_path, err_path = io_dir / "stdout.txt", io_dir / "stderr.txt"
    cmd: list[str] = [sys.executable, "-m", "stratagem.evaluation.worker", str(req), str(resp), str(prog)]
    prefix = _unshare_prefix() if settings.network == "deny" else None
    if prefix:
        cmd = [*prefix, *cmd]
    env = build_env(settings, workdir, marker)
    t0 = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,
            preexec_fn=functools.partial(_preexec, settings.memory_limit_bytes),
        )
        try:
            timed_out = await _wait(proc, settings, prog)
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
    text, problem = _read_response(resp, settings.max_response_bytes)
    return SandboxResult(
        response_text=text,
        response_problem=problem,
        progress=_read_progress(prog, max(2 * settings.max_response_bytes, 1 << 20)),
        returncode=rc,
        signal_name=sig,
        timed_out=timed_out,
        duration_s=duration,
        stdout_tail=_tail(out_path),
        stderr_tail=_tail(err_path),
        network_isolated=prefix is not None,
        strays_killed=strays,
    )


async def _wait(proc: asyncio.subprocess.Process, settings: SandboxSettings, progress: Path) -> bool:
    """Wait for the worker; True if it ran past its limit (and must be killed)."""
    phased = settings.compile_stage is not None and settings.compile_timeout_s is not None
    deadline = time.monotonic() + (settings.compile_timeout_s if phased else settings.timeout_s)  # type: ignore[operator]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        try:
            await asyncio.wait_for(proc.wait(), timeout=min(remaining, 0.25) if phased else remaining)
            return False
        except TimeoutError:
            if phased and _stage_ended(progress, settings.compile_stage):  # type: ignore[arg-type]
                phased = False
                deadline = time.monotonic() + settings.timeout_s


def _stage_ended(progress: Path, stage: str) -> bool:
    return any(
        e.get("event") == "end" and e.get("stage") == stage for e in _read_progress(progress, 1 << 20)
    )


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
