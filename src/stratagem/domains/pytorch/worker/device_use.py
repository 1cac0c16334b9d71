"""Owns how a PyTorch worker uses its device: the phases it reports and the device lock it holds.

Worker-side only. Every stage holds the device lock shared (on a GPU, the import part of
`load`, which runs only on the CPU, holds nothing), and the timed sections hold it exclusive,
so no other worker of any run on this machine uses the device while something is timed. A
program's first calls (torch.compile and Triton compiling and autotuning) run under the shared
lock, never the exclusive one; on a GPU, torch.compile's compiles themselves (dynamo's
compile-start to compile-end callbacks: tracing, lowering, Triton code generation, which run on
the CPU) let it go, as a build does, unless an autotuning mode may time kernels while it
compiles (`autotunes_while_compiling`). A `load_inline` build (`inline_builds.py`) holds no lock on a
GPU: `released` lets a shared hold go for the build and takes it again after, so another
design times while this one compiles. The worker reports its phase (`compile`, `run`, `wait`
for a lock) in its progress events; the sandbox charges each phase to its own limit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch  # noqa: F401 - worker-side (cpp_extension and dynamo only where needed)

from stratagem.worker_api.device_lock import DeviceLock, LockWindow, Mode

Emit = Callable[[str, dict[str, Any]], None]


class DeviceUse:
    """The phases and lock holds of one worker (the stages' `hold`, `phase`, `compiling`)."""

    def __init__(self, request: Mapping[str, Any], emit: Emit | None = None) -> None:
        self.device = str(request["device"])
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
        self._compiles_watched = False
        self.build_outside_lock = self.device.startswith("cuda")
        """Whether a `load_inline` build lets the shared lock go (`released`): on a GPU it runs
        on the CPU only, so another design may time meanwhile; on the CPU device a build
        competes with CPU timing and keeps the lock."""

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
        same mode or an exclusive one). The wait is reported as the `wait` phase; an exclusive
        hold on a GPU also moves this thread onto the cores reserved for timing.

        Raises:
            RuntimeError: an exclusive hold asked for inside a shared one (stages take the
                exclusive lock only outside shared sections, so two workers never deadlock).
        """
        if self._lock is None or self._held == "exclusive" or self._held == mode:
            yield
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
        if mode == "exclusive":
            self._pin(True)

    def _let_go(self) -> None:
        mode, cm = self._held, self._hold_cm
        if mode is None or cm is None:  # taking it again after a build failed
            return
        if mode == "exclusive":
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
        except OSError:
            pass

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """A program's first calls, where torch.compile and Triton compile and autotune, under
        the shared lock. The compile budget pays only for what compiles: torch.compile's
        compiles (reported as `compile` phases from dynamo's callbacks) and compiler processes
        (the sandbox sees them); a first call that sleeps, spins or hangs is running."""
        self._watch_compiles()
        with self.hold("shared"):
            yield

    def _watch_compiles(self) -> None:
        """Report torch.compile's compiles as `compile` phases, once torch._dynamo is loaded
        (whoever loaded it: a `torch.compile` call has by a program's first call)."""
        if self._compiles_watched or "torch._dynamo" not in sys.modules:
            return
        from torch._dynamo.callback import on_compile_end, on_compile_start

        depth = [0]
        let_go = [False]

        def start(_args: Any) -> None:
            depth[0] += 1
            if depth[0] == 1:
                self._phases.append("compile")
                self._emit("phase", {"phase": "compile"})
                if self._held == "shared" and self.build_outside_lock and not autotunes_while_compiling():
                    self._let_go()  # tracing and code generation use no device: another design may time
                    let_go[0] = True

        def end(_args: Any) -> None:
            depth[0] = max(0, depth[0] - 1)
            if depth[0] == 0 and let_go[0]:
                let_go[0] = False
                self._take("shared")
            if depth[0] == 0 and "compile" in self._phases:
                i = len(self._phases) - 1 - self._phases[::-1].index("compile")
                del self._phases[i]
                self._emit("phase", {"phase": self._phases[-1]})

        on_compile_start(start)
        on_compile_end(end)
        self._compiles_watched = True


AUTOTUNE_MODES = frozenset({"max-autotune", "max-autotune-no-cudagraphs"})
_AUTOTUNE_OPTIONS = ("max_autotune", "max_autotune_gemm", "max_autotune_pointwise", "coordinate_descent_tuning")
_SEEN = {"autotune": False}


def watch_compile_modes() -> None:
    """Wrap `torch.compile` (before any candidate code runs) to note whether this process asked
    for an autotuning mode or option: those time kernels on the device while compiling."""
    real = torch.compile
    if getattr(real, "_stratagem_watched", False):
        return

    def compile(*args: Any, **kwargs: Any) -> Any:
        options = kwargs.get("options") or {}
        if kwargs.get("mode") in AUTOTUNE_MODES or any(options.get(k) for k in _AUTOTUNE_OPTIONS):
            _SEEN["autotune"] = True
        return real(*args, **kwargs)

    compile._stratagem_watched = True  # type: ignore[attr-defined]
    compile.__doc__, compile.__wrapped__ = real.__doc__, real  # type: ignore[attr-defined]
    torch.compile = compile  # type: ignore[assignment]


def autotunes_while_compiling() -> bool:
    """Whether a torch.compile compile of this process may time kernels on the device: an
    autotuning mode or option was asked for (`watch_compile_modes`), or inductor's global
    config turns one on. Unknown (inductor not loaded yet) counts as no: nothing compiles then."""
    if _SEEN["autotune"]:
        return True
    cfg = sys.modules.get("torch._inductor.config")
    return cfg is not None and any(bool(getattr(cfg, k, False)) for k in _AUTOTUNE_OPTIONS)

