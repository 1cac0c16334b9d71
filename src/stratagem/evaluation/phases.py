"""Owns charging a worker process's wall time to its phases (`PhaseClock`: compile, run and
wait, each with its limit), by what the worker reports and by telling, from outside, whether
it is compiling: a compiler process among its session's processes (nvcc, ptxas, a C or C++
compiler, a linker, ninja). The sandbox kills a worker at the first limit it runs past.

The sandbox charges a worker's time to the compile limit only while it compiles, judged by what
its processes are doing, never by which call it is in: a first call that sleeps, spins or
deadlocks is running. Builds run compilers as child processes (`load_inline` through ninja,
Triton through ptxas, inductor's C++ through the system compiler); the worker itself reports
torch.compile's in-process compiles (`worker/stages.py`). Linux `/proc` only; elsewhere nothing
is ever seen compiling, and compiles count as running.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratagem.evaluation.sandbox import SandboxSettings

_COMPILER = re.compile(
    r"^(?:[\w.-]+-)?(?:gcc|g\+\+|c\+\+|cc|cc1|cc1plus|clang|clang\+\+|ld|ld\.gold|ld\.lld|collect2|as|"
    r"nvcc|cicc|ptxas|fatbinary|nvlink|cudafe\+\+|ninja|make|cmake)(?:-[\d.]+)?$"
)
"""A process name (`comm`, at most 15 characters) that is a compiler, an assembler, a linker or
a build tool, versioned (`g++-13`) or prefixed by a target (`x86_64-linux-gnu-gcc-13`) or not."""


def is_compiler(comm: str) -> bool:
    return bool(_COMPILER.match(comm.strip()))


def compilers_in_session(sid: int, proc: str = "/proc") -> list[str]:
    """The names of compiler processes in session `sid` (the worker's: it starts one), or []."""
    out: list[str] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        left, right = stat.find("("), stat.rfind(")")
        if left < 0 or right < left:
            continue
        fields = stat[right + 2:].split()
        if len(fields) > 3 and fields[3].lstrip("-").isdigit() and int(fields[3]) == sid:
            comm = stat[left + 1:right]
            if is_compiler(comm):
                out.append(comm)
    return out


JUDGE_START = "judge-start"
"""The judge's compile stage: it reports no stage of that name, only its phases (`compile`
while it starts and loads the problem, then `run` and `wait`)."""


class PhaseClock:
    """Charges the worker's wall time to its phases, by what the worker is doing.

    Phases: `compile` (the process's start up to its first stage, the `compile` phases the
    worker reports while it compiles in its own process, and any time a compiler process runs
    in the worker's session: `compilers_in_session`), `wait` (the worker waits for its device's lock) and
    `run` (everything else: imports, `__init__`, every call; a call that sleeps, spins or
    deadlocks runs, whichever call it is). Each has its own limit; time spent waiting for a
    lock is charged to no candidate limit. Events carry the worker's wall-clock time, used
    when it is plausible (between the phase's start and now)."""

    def __init__(self, settings: SandboxSettings, progress: Path, session: int | None = None) -> None:
        self.settings = settings
        self.progress = progress
        self.session = session
        """The worker's session id (its pid: it starts one), whose compiler processes are looked for."""
        self._offset = 0
        self._partial = b""
        phased = settings.compile_stage is not None and settings.compile_timeout_s is not None
        self.reported = "compile" if phased else "run"
        """The phase the worker last reported (the process start counts as compile)."""
        self.building: list[str] = []
        """The compiler processes seen at the last look (their names)."""
        self.phase = self.reported
        self.since = time.time()
        self.used: dict[str, float] = {"compile": 0.0, "run": 0.0, "wait": 0.0}
        self.limit_hit: str | None = None
        self._started = False

    def _switch(self, phase: str, at: float) -> None:
        at = min(max(at, self.since), time.time())
        self.used[self.phase] += at - self.since
        self.phase, self.since = phase, at

    def _settle(self, at: float) -> None:
        """Charge from `at` on to what the worker is doing: compile while a compiler runs
        (unless it waits for a lock), else what it reported."""
        phase = "compile" if self.building and self.reported == "run" else self.reported
        if phase != self.phase:
            self._switch(phase, at)

    def look(self) -> None:
        """Look for compiler processes in the worker's session."""
        if self.session is None:
            return
        self.building = compilers_in_session(self.session)
        self._settle(time.time())

    def poll(self) -> None:
        try:
            with open(self.progress, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read(1 << 20)
        except OSError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        stage = self.settings.compile_stage
        for line in lines:
            try:
                ev = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(ev, dict):
                continue
            if self.settings.on_event is not None:
                with contextlib.suppress(Exception):  # a view's failure never stops a worker
                    self.settings.on_event(ev)
            t_ev = ev.get("t")
            t = float(t_ev) if isinstance(t_ev, int | float) else time.time()
            if ev.get("event") == "phase" and ev.get("phase") in ("compile", "run", "wait"):
                self.reported = str(ev["phase"])
                self._settle(float(t))
            elif ev.get("event") == "start" and not self._started and stage not in (None, JUDGE_START):
                # the first stage ends the process's start (the judge reports its own phases)
                self._started = True
                if self.reported == "compile":
                    self.reported = "run"
                    self._settle(float(t))

    def totals(self) -> dict[str, float]:
        now = time.time()
        out = dict(self.used)
        out[self.phase] += max(0.0, now - self.since)
        return out

    def remaining_s(self) -> float:
        """Seconds until the current phase's limit (<= 0: over a limit; sets `limit_hit`)."""
        t = self.totals()
        s = self.settings
        compile_limit = s.compile_timeout_s if s.compile_timeout_s is not None else None
        if compile_limit is None:  # compiles count as run time
            t = {**t, "run": t["run"] + t["compile"], "compile": 0.0}
        left = {
            "run": s.timeout_s - t["run"],
            "compile": (compile_limit - t["compile"]) if compile_limit is not None else math.inf,
            "wait": s.lock_wait_timeout_s - t["wait"],
        }
        names = {"run": "run", "compile": "compile", "wait": "lock_wait"}
        for phase, rem in left.items():
            if rem <= 0:
                self.limit_hit = names[phase]
                return rem
        current = "run" if (self.phase == "compile" and compile_limit is None) else self.phase
        return left[current]
