"""Owns seeing the candidate's own native code from Python, without torch (for
`provenance.py`): which extension modules (compiled .so files) lie outside the Python
installation, their native functions by identity, and the profile hook (`sys.setprofile`)
that times the calls of those functions and counts its events, with the hook's own calibrated
cost per event, and which library calls do no work (`LAYOUT_CALLS`: views, metadata, allocation).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import sysconfig
import time
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

clock = time.process_time
"""The meter's clock: the process's CPU time, which another program's time on the cores does
not enter (a preempted call measured by wall time took a time slice of someone else's work,
and a cheat's own share rose past the threshold on a loaded machine); the intra-op threads'
time counts, as the work's."""

LAYOUT_CALLS = frozenset({
    # views and layout: no element is computed (a copy-capable one, below, may copy)
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "movedim", "moveaxis", "permute",
    "transpose", "swapaxes", "swapdims", "t", "unsqueeze", "squeeze", "expand", "expand_as", "narrow",
    "select", "as_strided", "split", "chunk", "unbind", "contiguous", "detach", "alias",
    # metadata queries and bookkeeping
    "size", "stride", "dim", "numel", "is_contiguous", "data_ptr", "storage_offset", "element_size",
    "is_floating_point", "get_device", "_get_tracing_state", "is_grad_enabled", "_has_torch_function",
    "_has_torch_function_unary", "_has_torch_function_variadic",
    # allocation without initialisation
    "empty", "empty_like", "new_empty", "empty_strided",
})
"""Library calls that do no work on the data (matched by their last name: `Tensor.reshape`,
`torch._C._get_tracing_state`): the strict share counts them apart, as layout, not as work."""
COPY_CAPABLE = frozenset({"reshape", "reshape_as", "flatten", "contiguous"})
"""Layout calls that copy when the data is not laid out for a view: one whose calls mostly took
longer than LAYOUT_COPY_S is counted as work (it copied)."""
LAYOUT_COPY_S = 1e-4
"""A copy-capable layout call's time (seconds) above which it looks like a copy: a view costs a
few microseconds (18.6 us for `Tensor.reshape` under the hook); a copy of a large tensor, more.
One call is no evidence: a view beside a CPU hog, or just after a parallel region whose OpenMP
threads still spin, took over 100 us of the process's CPU time in 403 of 3,000 calls (85 on an
idle machine), so the calls of a name are judged together (`split_work`)."""

Tally = list[float]
"""One library call's calls, as the meter counts them: `[calls, seconds, calls slower than
LAYOUT_COPY_S]`."""


def is_layout(name: str, copied: bool = False) -> bool:
    """Whether library calls named `name` did no work on the data; `copied`: most of them took
    longer than LAYOUT_COPY_S, as a copy does (it matters only for a copy-capable call)."""
    short = name.rsplit(".", 1)[-1]
    return short in LAYOUT_CALLS and not (copied and short in COPY_CAPABLE)


def split_work(tallies: Mapping[str, Tally]) -> tuple[set[str], set[str]]:
    """The library calls that did work and those that did none (layout), by name, each name
    judged over all its calls (`copied` when most of them were slow)."""
    layout = {n for n, t in tallies.items() if is_layout(n, copied=2 * t[2] > t[0])}
    return set(tallies) - layout, layout


def _so_file(obj: Any) -> Path | None:
    """The file of an extension module (a compiled .so), or None."""
    if not issubclass(type(obj), types.ModuleType):  # type(), not isinstance: no __class__ lookup
        return None
    f = vars(obj).get("__file__")
    if not isinstance(f, str) or not f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return None
    with contextlib.suppress(OSError):
        return Path(f).resolve()
    return None


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _installation() -> list[Path]:
    """Where the Python installation and its packages live (torch's libraries included)."""
    out = []
    for d in {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}:
        with contextlib.suppress(OSError):
            out.append(Path(d).resolve())
    return out


def own_functions(modules: list[types.ModuleType]) -> dict[int, str]:
    """The native functions of `modules` (module-level ones and the methods of the classes they
    define), by identity: id -> a readable name. The modules keep the objects alive."""
    out: dict[int, str] = {}
    for mod in modules:
        for name, value in list(vars(mod).items()):
            if isinstance(value, types.BuiltinFunctionType):
                out[id(value)] = f"{mod.__name__}.{name}"
            elif isinstance(value, type):
                for attr, member in list(vars(value).items()):
                    fn = getattr(member, "__func__", member)
                    if isinstance(fn, types.BuiltinFunctionType):
                        out[id(fn)] = f"{mod.__name__}.{name}.{attr}"
    return out


def _native_name(fn: Any) -> str:
    """A readable name of a native callable (`torch.relu`, `Tensor.clamp`)."""
    name = str(getattr(fn, "__name__", None) or type(fn).__name__)
    mod = getattr(fn, "__module__", None)
    if isinstance(mod, str) and mod:
        return f"{mod}.{name}"
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType) and not type(owner).__name__.startswith("pybind11"):
        return f"{type(owner).__name__}.{name}"
    return name


class Meter:
    """A profile hook (`sys.setprofile`) that times the calls of the candidate's own native
    functions, by identity, and the outermost other native calls (`library`, by name: which
    of them did work is `split_work`'s to say), and counts its events."""

    def __init__(self, own: Mapping[int, str], ghost_code: types.CodeType | None = None) -> None:
        self.own = own
        self.ghost_code = ghost_code
        """The code of the replay's stand-ins (`provenance._GHOST_CODE`): an own call made from
        one is not escaped."""
        self.reset()

    def reset(self) -> None:
        self.stack: list[tuple[int, float]] = []
        self.open_own = 0
        self.own_s = 0.0
        self.own_calls = 0
        self.escaped = 0
        """Own calls made from anywhere but a disabled function's stand-in (`_zeroing`)."""
        self.events = 0
        self.native_events = 0
        self.library: dict[str, Tally] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        self.events += 1
        if event == "c_call":
            self.native_events += 1
            key = id(arg)
            if key in self.own:
                self.open_own += 1
                self.own_calls += 1
                if frame is None or frame.f_code is not self.ghost_code:
                    self.escaped += 1
            self.stack.append((key, clock()))
        elif (event == "c_return" or event == "c_exception") and self.stack:
            self.native_events += 1
            key, t0 = self.stack.pop()
            took = clock() - t0
            if key in self.own:
                self.open_own -= 1
                if self.open_own == 0:
                    self.own_s += took
            elif not self.stack and self.open_own == 0:
                t = self.library.setdefault(_native_name(arg), [0, 0.0, 0])
                t[0] += 1
                t[1] += took
                t[2] += took > LAYOUT_COPY_S


@contextlib.contextmanager
def _hooked(meter: Meter) -> Iterator[None]:
    previous = sys.getprofile()
    sys.setprofile(meter)
    try:
        yield
    finally:
        sys.setprofile(previous)


def _hook_cost(n: int = 2000, rounds: int = 3) -> tuple[float, float]:
    """What the hook adds per Python event and per native event (seconds), the least of a few
    rounds: removed from a measured call's wall time, never more than it cost."""
    def py() -> None:
        return None

    def py_loop() -> None:
        for _ in range(n):
            py()

    def c_loop() -> None:
        for _ in range(n):
            abs(1)

    meter = Meter({})
    costs = []
    for loop in (py_loop, c_loop):
        plain = hooked = float("inf")
        for _ in range(rounds):
            t0 = clock()
            loop()
            plain = min(plain, clock() - t0)
            meter.reset()
            t0 = clock()
            with _hooked(meter):
                loop()
            hooked = min(hooked, clock() - t0)
        costs.append(max(0.0, hooked - plain) / (2 * n))
    return costs[0], costs[1]
