"""Owns what sets one sandboxed process apart from the parent (evaluation/sandbox.py runs it):
the scrubbed environment it is given (an allowlist of variables, minus anything whose name
looks like a secret; the slot's variables; its own HOME, TMPDIR and PYTHONPATH; this run's
marker), the command prefix of a private network namespace, its rlimits and the signal it
gets when its parent dies, and killing its process group and every process that still carries
the run's marker.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
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
    "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX", "STRATAGEM_BUILD_PCH",
    "STRATAGEM_BUILD_HEADER_DIET",
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
        PYTHONPATH=_python_path(settings.base_env),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
    )
    env[MARKER_VAR] = marker
    env.setdefault("PATH", os.defpath)
    return env
