"""Owns running one command of a command problem inside the worker: `/bin/sh -c` in its own
process group (killed whole at its time limit and after it ends, so nothing it started outlives
it), the wall time measured around it, its output captured; placeholders filled with shell-quoted
values; the fixed files written and verified by hash. Standard library only."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT_CHARS = 64 * 1024 * 1024


@dataclass(frozen=True)
class Ran:
    """One command's end: exit code (negative: the signal), output, wall time, time-out."""

    returncode: int
    stdout: str
    stderr: str
    wall_ms: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def why(self, what: str, limit_s: float) -> str:
        """One line on how a failed run ended, with its stderr's last line."""
        if self.timed_out:
            head = f"{what} ran past its {limit_s:g} s limit"
        elif self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            head = f"{what} died with {name}"
        else:
            head = f"{what} exited with code {self.returncode}"
        tail = [x for x in self.stderr.strip().splitlines() if x.strip()][-1:]
        return head + (f": {tail[0][:300]}" if tail else "")


def fill(command: str, values: Mapping[str, object]) -> str:
    """`command` with its placeholders replaced by the shell-quoted `values`."""
    return command.format_map({k: shlex.quote(str(v)) for k, v in values.items()})


def execute(command: str, cwd: Path, timeout_s: float, env: Mapping[str, str] | None = None) -> Ran:
    """Run `command` in `cwd` under `timeout_s` (with the variables `env` exported first, over
    those it inherits); never raises for what the command does."""
    if env:
        command = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "\n" + command
    t0 = time.perf_counter()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc.pid)
        out, err = proc.communicate()
    wall_ms = (time.perf_counter() - t0) * 1e3
    _kill(proc.pid)  # whatever it left running in its group
    if _reaping:
        kill_orphans()  # and whatever left the group (setsid, a double fork) and fell to this process
    return Ran(proc.returncode, out[:MAX_OUTPUT_CHARS].decode("utf-8", "replace"),
               err[-MAX_OUTPUT_CHARS:].decode("utf-8", "replace"), wall_ms, timed_out)


def _kill(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


PR_SET_CHILD_SUBREAPER = 36


_reaping = False
"""Whether `execute` kills this process's children after each command: only in a process that
became a subreaper for it (the worker), never in one whose other children are not its own."""


def become_subreaper() -> None:
    """Linux: processes a command orphans (a daemon that left its group) are re-parented to this
    process rather than to init, and `execute` kills them after each command. Elsewhere: nothing."""
    global _reaping
    with contextlib.suppress(OSError, AttributeError):
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            _reaping = True


def kill_orphans() -> int:
    """Kill every child of this process (between commands it has none of its own) and reap them;
    how many were killed."""
    killed = 0
    for _ in range(3):
        found = 0
        for pid in _children():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                found += 1
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # reap them (a killed child stays a zombie until then)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no child left
            if pid == 0:
                time.sleep(0.005)
        killed += found
        if not found:
            break
    return killed


def _children() -> list[int]:
    """This process's children: from /proc/self/task/*/children (one file per thread), else by
    scanning every process's parent in /proc; none where there is no /proc."""
    try:
        out: list[int] = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as fh:
                out += [int(x) for x in fh.read().split()]
        return out
    except OSError:
        pass
    me, out = str(os.getpid()), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if entry.isdigit() and len(fields) > 1 and fields[1] == me:
            out.append(int(entry))
    return out


_HASHED: dict[tuple[int, int, int, int], str] = {}
"""(inode, size, ctime, mtime) -> the file's hash: a file whose status is unchanged is not read
again (any write moves its ctime, which no process can set back)."""


def file_hash(p: Path) -> str:
    st = p.stat()
    key = (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return _HASHED[key]


def tree_hashes(root: Path, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """Relative path -> SHA-256 of every regular file under `root` (links as their target's name)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel in skip:
            continue
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            with contextlib.suppress(OSError):
                out[rel] = file_hash(p)
    return out


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_files(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink():
            p.unlink()
        p.write_text(text, encoding="utf-8")


def changed_files(root: Path, files: Mapping[str, str]) -> list[str]:
    """The fixed files under `root` whose content no longer hashes as given (or are gone, or links)."""
    out = []
    for name, text in files.items():
        p = root / name
        try:
            same = not p.is_symlink() and hashlib.sha256(p.read_bytes()).hexdigest() == sha256(text)
        except OSError:
            same = False
        if not same:
            out.append(name)
    return out
