"""Owns whether a run its database calls `running` is really running: a lease on a lock file
that the process running the search holds (`RunLease`), and the rule every reader applies
(`observed`: `RunStore.run`, hence `stratagem show`, `report`, `compare` and the MCP tools).

Why a lock: a run's database says `running` from the moment its search starts until the
search marks it finished or interrupted, and a process killed outright (SIGKILL, the OOM
killer, a machine lost) marks nothing. The process that runs a search therefore holds a shared
`flock` on `run.lock` in the run directory for as long as its store has the run marked
`running`; the kernel drops that lock when the process ends, however it ends. A reader that can
take the lock exclusively (at once, without waiting, and letting go at once) knows that no
process holds it. The alternatives are weaker: a pid in a file may name an unrelated process
once the pid is reused, and says nothing about a process on another machine; the age of
`updated_at` needs a heartbeat, and a search writes nothing for minutes while an agent thinks
or a long evaluation runs, so any threshold is either slow to notice a dead run or wrong about
a busy one.

Holders share the lock, so a reader's instant exclusive probe only delays a process taking it
by that instant, and two processes on one run directory never block each other. The file
also holds the holder's pid and host (what the views say about a dead run); it is never
removed. What stays open (`holder_alive` answers None, and the stored status stands): a run
written before leases existed (no `run.lock`), and a filesystem whose locks fail. A child
forked without exec inherits the lock, so a run counts as alive while such a child survives
it (the harness's workers are started with exec and hold no lock).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from stratagem.store.records import RunRecord

RUN_LOCK = "run.lock"
"""The lease's file, in the run directory."""
KILLED = "killed: the process that ran it{who} ended without marking the run (continue it with `stratagem resume`)"
"""The stop reason of a run marked `running` that no process runs."""
PROBES = 3
PROBE_GAP_S = 0.005
"""A reader tries the lock this many times, this far apart, before it calls the run alive: a
holder holds it throughout, another reader's probe only for an instant."""


class RunLease:
    """A shared lock on a run directory's `run.lock`, held until `release` (or the process ends)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, run_dir: Path) -> RunLease | None:
        """Hold the lease of `run_dir`, writing this process's pid and host into the file;
        None when the lock cannot be taken here (readers then cannot tell, and say what the
        database says)."""
        try:
            fd = os.open(run_dir / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a reader's probe holds it
            body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, body.encode(), 0)
        except OSError:
            os.close(fd)
            return None
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the lock
            self._fd = None


def holder_alive(run_dir: Path) -> bool | None:
    """Whether a process holds `run_dir`'s lease: True, False, or None when it cannot be
    told (no `run.lock`: a run from before leases; locks failing here). Writes nothing."""
    try:
        fd = os.open(run_dir / RUN_LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        for attempt in range(PROBES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a holder, or another reader's probe at this instant
                if attempt + 1 < PROBES:
                    time.sleep(PROBE_GAP_S)
                continue
            except OSError:
                return None
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True
    finally:
        os.close(fd)


def last_holder(run_dir: Path) -> dict[str, Any]:
    """The pid and host the lease's file names (the last process that held it), or {}."""
    try:
        body = json.loads((run_dir / RUN_LOCK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def observed(run: RunRecord, run_dir: Path) -> RunRecord:
    """`run` as it really is: marked `running` while no process holds its lease, it is
    `interrupted`, stopped by `KILLED`; otherwise as stored."""
    if run.status != "running" or holder_alive(run_dir) is not False:
        return run
    h = last_holder(run_dir)
    who = f" (pid {h['pid']} on {h.get('host') or '?'})" if "pid" in h else ""
    return run.model_copy(update={"status": "interrupted", "stop_reason": KILLED.format(who=who)})
