"""Owns how a PyTorch worker uses its device: the lock holds and phases of every worker
(`worker_api/device_use.py`) plus torch.compile's compiles.

Worker-side only. Every stage holds the device lock shared (on a GPU, the import part of
`load`, which runs only on the CPU, holds nothing), and the timed sections hold it exclusive.
A program's first calls (torch.compile and Triton compiling and autotuning) run under the
shared lock, never the exclusive one; on a GPU, torch.compile's compiles themselves (dynamo's
compile-start to compile-end callbacks: tracing, lowering, Triton code generation, which run on
the CPU) let it go, as a build does, unless an autotuning mode may time kernels while it
compiles (`autotunes_while_compiling`). A `load_inline` build (`build/inline_builds.py`) holds no lock on a
GPU: `released` lets a shared hold go for the build and takes it again after, so another
design times while this one compiles.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import torch  # noqa: F401 - worker-side (dynamo only where needed)

from stratagem.worker_api import device_use
from stratagem.worker_api.stages import Emit


class DeviceUse(device_use.DeviceUse):
    """The phases and lock holds of one PyTorch worker (`worker_api/device_use.py`: the
    stages' `hold`, `phase`, `released`) and its compiles (`compiling`)."""

    def __init__(self, request: Mapping[str, Any], emit: Emit | None = None) -> None:
        super().__init__(request, emit)
        self._compiles_watched = False

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

