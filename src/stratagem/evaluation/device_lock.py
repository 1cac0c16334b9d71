"""Owns the shared/exclusive lock of one device, across processes (and runs) on one machine.

Every piece of stratagem work that uses a device takes its lock: work that may overlap with
other work (correctness trials, autotuning, compiles on the CPU) takes it shared; timing takes
it exclusive, so nothing else of stratagem runs on that device while something is timed. The
lock is a pair of `flock` files: `PATH` (shared or exclusive) and `PATH.gate`, a turnstile that
a waiting exclusive holder keeps closed, so a stream of shared holders cannot starve timing
(writer preference). A process that dies releases its locks with its file descriptors.

Standard library only: the sandboxed worker uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Mode = Literal["shared", "exclusive"]


@dataclass(frozen=True)
class LockWindow:
    """One hold of the lock, in wall-clock seconds (`time.time()`), for the record."""

    mode: Mode
    waited_s: float
    acquired_at: float
    released_at: float

    def to_json(self) -> dict[str, object]:
        return {"mode": self.mode, "waited_s": self.waited_s, "acquired_at": self.acquired_at,
                "released_at": self.released_at}


class DeviceLock:
    """The lock at `path` (created if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.gate_path = path + ".gate"

    @contextlib.contextmanager
    def hold(self, mode: Mode) -> Iterator[float]:
        """Hold the lock in `mode`; yields the seconds spent waiting for it."""
        t0 = time.monotonic()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            gate = os.open(self.gate_path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)  # queue behind a waiting exclusive holder
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH)
                finally:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            finally:
                os.close(gate)
            try:
                yield time.monotonic() - t0
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
