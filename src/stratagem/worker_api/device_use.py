"""Owns how a worker uses its device: the phases it reports and the device lock it holds.

Every stage holds the device lock shared and the timed sections hold it exclusive, so no
other worker of any run on this machine uses the device while something is timed; an
exclusive hold on a GPU slot also moves the worker onto the cores reserved for that GPU's
timing (`timing_cores`). A build that uses no device lets a shared hold go (`released`: on a
GPU, so another design times while this one builds). The worker reports its phase
(`compile`, `run`, `wait` for a lock, with the holder it waits on) in its progress events; the
sandbox charges each phase to its own limit. Every hold is kept as a `LockWindow`.

Standard library only: the sandboxed worker of every domain uses it (the PyTorch domain adds
its compiles: `domains/pytorch/worker/device_use.py`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from stratagem.worker_api.device_lock import DeviceLock, LockWindow, Mode
from stratagem.worker_api.stages import Emit


class DeviceUse:
    """The phases and lock holds of one worker (the stages' `hold`, `phase`, `released`)."""

    def __init__(self, request: Mapping[str, Any], emit: Emit | None = None) -> None:
        self.device = str(request.get("device") or "cpu")
        self._emit = emit or (lambda _e, _d: None)
        path = request.get("timing_lock")
        self._lock = DeviceLock(str(path)) if path else None
        self._owner = dict(request.get("lock_owner") or {})
        self._held: Mode | None = None
        self._hold_cm: contextlib.AbstractContextManager[float] | None = None
        self._hold_since = (0.0, 0.0)
        self._hold_seen: dict[str, Any] | None = None
        self._phases: list[str] = ["run"]
        self.windows: list[LockWindow] = []
        """Every lock hold of this worker (the stage results carry their own)."""
        self._timing_cores = [int(c) for c in request.get("timing_cores") or ()]
        self._base_cores: set[int] | None = None
        self.alone = bool(request.get("alone"))
        """Every hold is exclusive (`EvalRequest.alone`): no other worker uses the device beside
        this one."""
        self.build_outside_lock = self.device.startswith("cuda")
        """Whether a build lets the shared lock go (`released`): on a GPU it runs on the CPU
        only, so another design may time meanwhile; on the CPU device a build competes with
        CPU timing and keeps the lock."""

    @contextlib.contextmanager
    def phase(self, name: str, **about: Any) -> Iterator[None]:
        """Report `name` (`compile`, `run`, `wait`) as the worker's phase while inside (with
        `about` it: on whom a `wait` waits)."""
        self._phases.append(name)
        self._emit("phase", {"phase": name, **about})
        try:
            yield
        finally:
            self._phases.pop()
            self._emit("phase", {"phase": self._phases[-1]})

    @contextlib.contextmanager
    def hold(self, mode: Mode) -> Iterator[None]:
        """Hold the device lock in `mode` (a no-op without a lock, or inside a hold of the
        same mode or an exclusive one; held `alone`, every hold is exclusive). The wait is
        reported as the `wait` phase; a timed section (an exclusive hold) on a GPU also moves
        this thread onto the cores reserved for timing.

        Raises:
            RuntimeError: an exclusive hold asked for inside a shared one (stages take the
                exclusive lock only outside shared sections, so two workers never deadlock).
        """
        if self._lock is None or self._held == "exclusive" or self._held == mode:
            # a timed section inside a hold of a worker alone (its other holds are exclusive too)
            pin = self._lock is not None and mode == "exclusive" and self._base_cores is None
            if pin:
                self._pin(True)
            try:
                yield
            finally:
                if pin:
                    self._pin(False)
            return
        if self._held is not None:
            raise RuntimeError("exclusive device lock requested inside a shared hold")
        self._take(mode)
        try:
            yield
        finally:
            self._let_go()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Let a shared hold go while inside (a build: it uses no device), and take it again
        after, waiting as any holder waits. An exclusive hold is kept (a build inside a timed
        section is the candidate's own doing), and so is any hold on a device whose builds
        compete with timing (`build_outside_lock`)."""
        if self._held != "shared" or not self.build_outside_lock:
            yield
            return
        self._let_go()
        try:
            yield
        finally:
            self._take("shared")

    def _take(self, mode: Mode) -> None:
        assert self._lock is not None
        seen: list[Any] = []
        timing = mode == "exclusive"
        mode = "exclusive" if self.alone else mode

        @contextlib.contextmanager
        def waiting(holder: dict[str, Any] | None) -> Iterator[None]:
            seen.append(holder)
            with self.phase("wait", holder=holder):
                yield

        cm = self._lock.hold(mode, owner=self._owner, waiting=waiting)
        waited = cm.__enter__()
        self._hold_cm, self._held = cm, mode
        self._hold_since = (waited, time.time())
        self._hold_seen = seen[0] if seen else None
        if timing:
            self._pin(True)

    def _let_go(self) -> None:
        mode, cm = self._held, self._hold_cm
        if mode is None or cm is None:  # taking it again after a build failed
            return
        if self._base_cores is not None:
            self._pin(False)
        self._held, self._hold_cm = None, None
        released = time.time()  # before the lock goes: the window lies inside the hold
        cm.__exit__(None, None, None)
        waited, acquired = self._hold_since
        self.windows.append(LockWindow(mode, waited, acquired, released, self._hold_seen))

    def _pin(self, timing: bool) -> None:
        """GPU timing runs on the reserved cores, everything else off them (Linux only)."""
        if not self._timing_cores or not hasattr(os, "sched_setaffinity"):
            return
        try:
            if timing:
                self._base_cores = os.sched_getaffinity(0)
                os.sched_setaffinity(0, self._timing_cores)
            elif self._base_cores is not None:
                os.sched_setaffinity(0, self._base_cores)
                self._base_cores = None
        except OSError:
            pass
