"""Owns what sets one sandboxed process apart from the parent (evaluation/sandbox.py runs it):
the scrubbed environment it is given (an allowlist of variables, with those the request's
domain names for its worker, minus anything whose name looks like a secret; the slot's
variables; the worker's compile caches in the slot's folder; its own HOME, TMPDIR and
PYTHONPATH; this run's marker), the command prefix of a private network namespace, its rlimits and the signal it
gets when its parent dies, and killing its process group and every process that still carries
the run's marker.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import stratagem

if TYPE_CHECKING:
    from stratagem.evaluation.sandbox import SandboxSettings

MARKER_VAR = "STRATAGEM_SANDBOX_ID"

_ALLOW_EXACT = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX",
})
_ALLOW_PREFIX = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "CUDNN_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)


def scrub_environment(env: Mapping[str, str], keep: tuple[str, ...] = ()) -> dict[str, str]:
    """The allowlisted, secret-free part of an environment; `keep`: names the worker's domain
    adds to the allowlist (`Domain.worker.keep_env`; one ending in `*` a prefix)."""
    exact = _ALLOW_EXACT.union(k for k in keep if not k.endswith("*"))
    prefixes = (*_ALLOW_PREFIX, *(k[:-1] for k in keep if k.endswith("*")))
    return {k: v for k, v in env.items() if not _SECRET.search(k) and (k in exact or k.startswith(prefixes))}


def for_request(settings: SandboxSettings, request_json: str) -> SandboxSettings:
    """`settings` with what the request says its domain's worker needs (`EvalRequest.keep_env`,
    `caches`): the variables it keeps, and its compile caches in the slot's folder (created)."""
    try:
        req = json.loads(request_json)
    except ValueError:
        return settings
    root, caches = settings.cache_dir, {}
    if root is not None:
        caches = {str(var): str(root / str(folder)) for var, folder in dict(req.get("caches") or {}).items()}
    for path in caches.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(settings, keep_env=tuple(str(k) for k in req.get("keep_env") or ()),
                               slot_env={**settings.slot_env, **caches})


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


def _python_path(env: Mapping[str, str]) -> str:
    """stratagem's own root first, then the parent's PYTHONPATH entries: the worker imports this
    copy of stratagem, and the libraries the user put on the path (a problem's check script's
    numpy and scipy, wheels carried to a machine) are found as in the parent."""
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([_package_root(), *extra]))


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


def _preexec(memory_limit: int | None, avoid_cores: tuple[int, ...] = ()) -> None:
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    if avoid_cores and hasattr(os, "sched_setaffinity"):  # a worker started ahead: off the timing cores
        rest = os.sched_getaffinity(0) - set(avoid_cores)
        if rest:
            os.sched_setaffinity(0, rest)


def build_env(settings: SandboxSettings, workdir: Path, marker: str) -> dict[str, str]:
    env = scrub_environment(settings.base_env, settings.keep_env)
    env.update(settings.slot_env)
    env.update(
        HOME=str(workdir),
        TMPDIR=str(workdir),
        PYTHONPATH=_python_path(settings.base_env),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
    )
    env[MARKER_VAR] = marker
    env.setdefault("PATH", os.defpath)
    return env
