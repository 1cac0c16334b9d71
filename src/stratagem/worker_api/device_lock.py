"""Owns the shared/exclusive lock of one device, across processes (and runs) on one machine.

Every piece of stratagem work that uses a device takes its lock: work that may overlap with
other work (correctness trials, autotuning, compiles on the CPU) takes it shared; timing takes
it exclusive, so nothing else of stratagem runs on that device while something is timed. The
lock is a pair of `flock` files: `PATH` (shared or exclusive) and `PATH.gate`, a turnstile that
a waiting exclusive holder keeps closed, so a stream of shared holders cannot starve timing
(writer preference). A process that dies releases its locks with its file descriptors.

An exclusive holder writes who it is to `PATH.owner` (JSON: the owner's fields, its pid, the
mode and when it took the lock) and removes it on release, so a waiter can say on whom it
waits: this run, or another process on the machine. The file is advisory (what a waiter
reports), never what the lock decides by.

Standard library only: the sandboxed worker uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["shared", "exclusive"]


@dataclass(frozen=True)
class LockWindow:
    """One hold of the lock, in wall-clock seconds (`time.time()`), for the record."""

    mode: Mode
    waited_s: float
    acquired_at: float
    released_at: float
    holder: Mapping[str, Any] | None = field(default=None)
    """Who held the lock exclusively when the wait began (`DeviceLock.holder`), if anyone."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode, "waited_s": self.waited_s, "acquired_at": self.acquired_at,
                                  "released_at": self.released_at}
        if self.holder is not None:
            out["holder"] = dict(self.holder)
        return out


class DeviceLock:
    """The lock at `path` (created if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.gate_path = path + ".gate"
        self.owner_path = path + ".owner"

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock exclusively now, as its holder wrote it (None: nobody does, or
        only shared holders)."""
        try:
            with open(self.owner_path, encoding="utf-8") as fh:
                d = json.load(fh)
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def _own(self, owner: Mapping[str, Any]) -> None:
        tmp = f"{self.owner_path}.{os.getpid()}"
        with contextlib.suppress(OSError):
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({**owner, "pid": os.getpid(), "mode": "exclusive", "since": time.time()}, fh)
            os.replace(tmp, self.owner_path)

    def _disown(self) -> None:
        d = self.holder()
        if d is not None and d.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(self.owner_path)

    @contextlib.contextmanager
    def hold(self, mode: Mode, owner: Mapping[str, Any] | None = None,
             waiting: Callable[[dict[str, Any] | None], contextlib.AbstractContextManager[Any]] | None = None,
             ) -> Iterator[float]:
        """Hold the lock in `mode`; yields the seconds spent waiting for it. An exclusive
        holder with an `owner` (what a waiter may be told: a process id, a label) writes it
        beside the lock while it holds it. `waiting`, when the lock is not free at once, is
        entered around the wait with the holder as it wrote itself (`holder`)."""
        t0 = time.monotonic()
        flag = fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            gate = os.open(self.gate_path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                if not _take_now(gate, fd, flag):
                    with waiting(self.holder()) if waiting is not None else contextlib.nullcontext():
                        fcntl.flock(gate, fcntl.LOCK_EX)  # queue behind a waiting exclusive holder
                        try:
                            fcntl.flock(fd, flag)
                        finally:
                            fcntl.flock(gate, fcntl.LOCK_UN)
            finally:
                os.close(gate)
            owned = mode == "exclusive" and owner is not None
            if owned:
                self._own(owner)  # type: ignore[arg-type]
            try:
                yield time.monotonic() - t0
            finally:
                if owned:
                    self._disown()
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _take_now(gate: int, fd: int, flag: int) -> bool:
    """Take the lock without waiting, through the gate as a waiter would; False if either is
    held (nothing is then held)."""
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    try:
        fcntl.flock(fd, flag | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
