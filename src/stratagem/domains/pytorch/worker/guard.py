"""Owns the worker's tamper evidence: identities of harness functions, global torch flags,
process-wide hooks, what the candidate left on the harness's input tensors, and who started
each thread and child process.

Worker-side only. A snapshot is taken when the worker starts, before any candidate code is
imported; `changes()` lists every function that was rebound (torch's namespaces, `Tensor` and
`nn.Module` and every `nn` module's `forward`, builtins, time, `Thread.start` and
`Popen.__init__`, the harness's own modules and the names they import, the reference's module
once loaded: `watch`), every global flag that moved (TF32, cuDNN, matmul precision, default
dtype, determinism, thread counts) and every process-wide hook added or removed (`hook_changes`:
torch's global module hooks, whoever wrote them, Python or native code; the torch-function and
dispatch mode stacks; the interpreter's trace and profile functions), not counting torch's own
(code in torch's files). `Inputs` seals the harness's input tensors before a candidate call and
says what the call stored on them (attributes) or swapped under them (storage). Before the snapshot, `watch_starts` records who starts each thread and each
`subprocess` child: the candidate, torch compiling (its compile pool, its sidecar process and
monitors, started inside a call that compiles), or the harness; `Threads.left_by_candidate`
and `spawned_by_candidate` count only the candidate's.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import math
import statistics
import subprocess
import sys
import threading
import time
import types
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import torch

from stratagem.domains.pytorch.worker import native_calls

_TORCH_FUNCS = (
    "allclose", "isclose", "equal", "where", "isnan", "isinf", "isfinite", "abs", "max", "min",
    "sum", "empty", "empty_like", "zeros", "zeros_like", "full", "rand", "randn", "randint",
    "manual_seed", "no_grad", "compile", "device", "is_grad_enabled",
)
_TENSOR_METHODS = (
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__",
    "__len__", "__getitem__", "__setitem__", "__torch_function__", "clone", "copy_", "to",
    "float", "double", "item", "tolist", "abs", "max", "sum", "any", "all", "nonzero", "reshape",
    "view", "contiguous", "numel", "element_size", "is_floating_point", "detach", "clamp_min",
    "fill_", "zero_", "untyped_storage", "data_ptr", "size", "dim",
)
_CUDA_FUNCS = ("synchronize", "Event", "current_stream", "empty_cache", "mem_get_info")
_EVENT_METHODS = ("record", "elapsed_time", "synchronize", "query", "wait")
_BUILTINS = (
    "len", "isinstance", "issubclass", "type", "float", "int", "bool", "str", "max", "min",
    "sum", "sorted", "abs", "any", "all", "zip", "range", "iter", "next", "getattr", "setattr",
    "hasattr", "id", "print", "open", "repr", "dict", "list", "tuple", "set", "object",
)
_MODULES = {
    time: ("perf_counter", "perf_counter_ns", "time", "monotonic", "sleep"),
    statistics: ("median", "quantiles", "fmean"),
    math: ("isnan", "isinf", "isfinite", "ceil"),
    sys: ("exit",),
}
HARNESS_MODULES = (
    "stratagem.domains.pytorch.worker.compare",
    "stratagem.domains.pytorch.worker.timing",
    "stratagem.domains.pytorch.worker.runtime",
    "stratagem.domains.pytorch.worker.stages",
    "stratagem.domains.pytorch.worker.timed",
    "stratagem.domains.pytorch.worker.params",
    "stratagem.domains.pytorch.worker.anchor",
    "stratagem.domains.pytorch.worker.redteam.audit",
    "stratagem.domains.pytorch.worker.redteam.timing",
    "stratagem.domains.pytorch.worker.redteam.fired",
    "stratagem.domains.pytorch.worker.correctness",
    "stratagem.domains.pytorch.worker.record",
    "stratagem.domains.pytorch.worker.guard",
    "stratagem.domains.pytorch.worker.device_use",
    "stratagem.domains.pytorch.build.inline_builds",
    "stratagem.domains.pytorch.build.build_cache",
    "stratagem.evaluation.worker",
    "stratagem.core.graph",
    "stratagem.core.verdict",
    "stratagem.core.paired",
    "stratagem.worker_api.device_lock",
    "stratagem.worker_api.audit",
)


def _namespace(prefix: str, ns: Any, static: bool) -> dict[str, Any]:
    """Every callable a namespace holds. Classes are read statically over `dir()`, so an
    override added to a subclass's dict (`torch.Tensor.__sub__ = ...`) shows as a change."""
    out: dict[str, Any] = {}
    names = dir(ns) if static else list(vars(ns))
    for name in names:
        if name.startswith("__") and name not in _DUNDERS:
            continue
        try:
            value = inspect.getattr_static(ns, name) if static else vars(ns)[name]
        except (AttributeError, KeyError):
            continue
        if static or callable(value):
            out[f"{prefix}.{name}"] = value
    return out


_DUNDERS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__", "__len__",
    "__getitem__", "__setitem__", "__torch_function__", "__add__", "__sub__", "__mul__",
    "__truediv__", "__matmul__", "__abs__", "__neg__", "__pow__", "__rsub__", "__radd__", "__rmul__",
    "__iadd__", "__isub__", "__imul__", "__array__", "__repr__", "__format__", "__hash__",
})


def _functions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    out.update(_namespace("torch", torch, static=False))
    out.update(_namespace("torch.Tensor", torch.Tensor, static=True))
    base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
    if base is not None:
        out.update(_namespace("torch._C.TensorBase", base, static=True))
    out.update(_namespace("torch.nn.functional", torch.nn.functional, static=False))
    for name in _TORCH_FUNCS:
        if hasattr(torch, name):
            out[f"torch.{name}"] = getattr(torch, name)
    for name in _TENSOR_METHODS:
        if hasattr(torch.Tensor, name):
            out[f"torch.Tensor.{name}"] = inspect.getattr_static(torch.Tensor, name)
    for name in _CUDA_FUNCS:
        out[f"torch.cuda.{name}"] = getattr(torch.cuda, name, None)
    for name in _EVENT_METHODS:
        out[f"torch.cuda.Event.{name}"] = inspect.getattr_static(torch.cuda.Event, name, None)
    out["torch.Tensor"] = torch.Tensor
    out["torch.nn.Module.__call__"] = inspect.getattr_static(torch.nn.Module, "__call__")
    out.update(_namespace("torch.nn.Module", torch.nn.Module, static=True))
    out.update(_namespace("torch.nn.modules.module", torch.nn.modules.module, static=False))
    for name, cls in vars(torch.nn).items():
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and "forward" in vars(cls):
            out[f"torch.nn.{name}.forward"] = vars(cls)["forward"]
    for name in _BUILTINS:
        out[f"builtins.{name}"] = getattr(builtins, name)
    for mod, names in _MODULES.items():
        for name in names:
            out[f"{mod.__name__}.{name}"] = getattr(mod, name)
    out["threading.Thread.start"] = threading.Thread.start  # `watch_starts`'s, once installed
    out["subprocess.Popen.__init__"] = subprocess.Popen.__init__
    for modname in HARNESS_MODULES:
        mod = sys.modules.get(modname)
        if mod is not None:
            out.update(_module_functions(modname, mod))
    return out


def _module_functions(modname: str, mod: types.ModuleType) -> dict[str, Any]:
    """A module's own functions and classes, the classes' methods (static), and the modules it
    imported (a rebound `torch` in its globals shows)."""
    out: dict[str, Any] = {f"sys.modules[{modname}]": sys.modules.get(modname)}
    for name, value in vars(mod).items():
        if isinstance(value, types.ModuleType):
            out[f"{modname}.{name}"] = value
        if not callable(value) or name.startswith("__"):
            continue
        out[f"{modname}.{name}"] = value
        members = vars(value).items() if isinstance(value, type) else ()
        for attr, member in members:
            if callable(member) and not attr.startswith("__"):
                out[f"{modname}.{name}.{attr}"] = member
    return out


def _flags() -> dict[str, Any]:
    b = torch.backends
    flags: dict[str, Any] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "num_threads": torch.get_num_threads(),
        "anomaly_detection": torch.is_anomaly_enabled(),
        "cudnn.enabled": b.cudnn.enabled,
        "cudnn.benchmark": b.cudnn.benchmark,
        "cudnn.deterministic": b.cudnn.deterministic,
        "cudnn.allow_tf32": b.cudnn.allow_tf32,
    }
    matmul = b.cuda.matmul
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        flags[f"cuda.matmul.{name}"] = getattr(matmul, name, None)
    return flags


_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _torch_wrapper_of(new: Any, old: Any) -> bool:
    """True for torch's own wrappers around the original (importing torch._dynamo rebinds
    `torch.manual_seed` to a `functools.wraps` wrapper defined in torch's files)."""
    code = getattr(new, "__code__", None)
    if code is None or not str(Path(code.co_filename).resolve()).startswith(_TORCH_DIR):
        return False
    try:
        return inspect.unwrap(new) is old
    except ValueError:
        return False


def native_threads() -> int:
    """Threads of this process, native ones included (Linux), else Python's count."""
    try:
        return len(list(Path("/proc/self/task").iterdir()))
    except OSError:
        return threading.active_count()


_REGISTRIES = tuple(name for name, value in vars(torch.nn.modules.module).items()
                    if name.startswith("_global_") and isinstance(value, dict))
"""torch's global module-hook registries (`_global_forward_hooks`, ...), by name."""


def _hooks(trace: bool) -> dict[str, Any]:
    """The process-wide hooks: each global module-hook registry of `torch.nn.modules.module`
    (the dict and its entries: whoever writes into it, through `register_module_forward_hook`,
    a function's `__globals__` or native code, writes there), the torch-function and dispatch
    mode stacks, and (`trace`) the interpreter's trace and profile functions, which the
    harness's own profile hook holds during a measured call (`native_calls.py`)."""
    module = torch.nn.modules.module
    out: dict[str, Any] = {}
    for name in _REGISTRIES:
        value = getattr(module, name, None)
        out[f"torch.nn.modules.module.{name}"] = (value, tuple(value.items()), len(value)) \
            if isinstance(value, dict) else (value, (), 0)
    out["the torch-function mode stack"] = torch._C._len_torch_function_stack()
    out["the dispatch mode stack"] = torch._C._len_torch_dispatch_stack()
    if trace:
        profile = sys.getprofile()
        if isinstance(profile, native_calls.Meter):  # the harness's own (the strict policy's provenance watch)
            profile = None
        out.update({"sys.settrace": sys.gettrace(), "sys.setprofile": profile,
                    "threading.settrace": threading.gettrace(), "threading.setprofile": threading.getprofile()})
    return out


def _torch_own(fn: Any) -> bool:
    """A hook whose code is in torch's files (torch registers its own)."""
    code = getattr(fn, "__code__", None)
    return code is not None and _real(code.co_filename).startswith(_TORCH_DIR)


def _where(fn: Any) -> str:
    """A hook named for a report: its name and where its code is (native code has no file)."""
    fn = getattr(fn, "func", fn)  # functools.partial
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name} ({Path(code.co_filename).name}:{code.co_firstlineno})" if code is not None else f"{name} (native)"


def _hook_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, old in before.items():
        new = now.get(name)
        if isinstance(old, tuple) and isinstance(new, tuple):  # a registry: (the dict, its entries)
            if new[0] is not old[0]:
                out.append(f"{name} was replaced (a process-wide hook registry)")
                continue
            added = [h for k, h in new[1] if (k, h) not in old[1] and not _torch_own(h)]
            gone = [h for k, h in old[1] if (k, h) not in new[1]]
            if added:
                out.append(f"a process-wide hook was registered in {name}: {', '.join(_where(h) for h in added[:3])}")
            if gone:
                out.append(f"{len(gone)} hook(s) present before the candidate loaded were removed from {name}")
            if new[2] != len(new[1]) and old[2] == len(old[1]):  # C code wrote around the dict's order
                out.append(f"{name} holds {new[2]} entries, {len(new[1])} of them in its order (written by C code)")
        elif new is not old and new != old:
            what = f"{old} -> {new}" if isinstance(old, int) else f"{_where(new) if new else None} (was {old and _where(old)})"
            out.append(f"{name} changed: {what}")
    return out


class Snapshot:
    """What the harness relies on, captured before candidate code runs."""

    def __init__(self) -> None:
        self.functions = _functions()
        self.flags = _flags()
        self.hooks = _hooks(trace=True)
        self._per_call = _hooks(trace=False)
        self.watched: dict[str, types.ModuleType] = {}

    def watch(self, name: str, module: types.ModuleType) -> None:
        """Add a module loaded after the snapshot, before candidate code (the reference's)."""
        self.watched[name] = module
        self.functions.update(_module_functions(name, module))

    def hook_changes(self, trace: bool = False) -> list[str]:
        """The process-wide hooks added, removed or replaced since the snapshot (cheap: after
        every candidate call), the trace and profile functions only with `trace` (outside
        the harness's own profile hook: `changes`)."""
        now = _hooks(trace)
        before = self.hooks if trace else self._per_call
        if all(v[0] is before[k][0] and v[1:] == before[k][1:] if isinstance(v, tuple) else v == before[k]
               for k, v in now.items()):
            return []
        return _hook_changes(before, now)

    def changes(self) -> list[str]:
        """Every rebound function, every moved flag and every process-wide hook, as readable lines."""
        now = _functions()
        for name, module in self.watched.items():
            now.update(_module_functions(name, module))
        out = [
            f"{name} was replaced"
            for name, obj in self.functions.items()
            if now.get(name) is not obj and not _torch_wrapper_of(now.get(name), obj)
        ]
        flags = _flags()
        out += [
            f"global flag {name} changed from {old!r} to {flags.get(name)!r}"
            for name, old in self.flags.items()
            if flags.get(name) != old
        ]
        return out + self.hook_changes(trace=True)


TORCH_MARKS = frozenset({
    "_dynamo_dynamic_indices", "_dynamo_dynamic_range", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices",
    "_dynamo_strict_unbacked_indices", "_dynamo_unbacked_bounds", "_dynamo_hint_overrides", "_dynamo_shape_ids",
    "_dynamo_marked_static", "_dynamo_static_indices", "_dynamo_static_input_type", "_has_dynamo_dim_marking",
    "_specialize_on"})
"""The attributes torch's own marking functions set on a tensor (`torch._dynamo.mark_dynamic`,
`maybe_mark_dynamic`, `mark_static`, ...): an honest design may mark its inputs' dimensions."""


def _holds_tensor(value: Any, depth: int = 8) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0 or not isinstance(value, dict | set | frozenset | list | tuple):
        return False
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    return any(_holds_tensor(x, depth - 1) for x in items)


def _torch_mark(name: str, value: Any) -> bool:
    """One of torch's marks, holding indices and bounds (no tensor: not a place for outputs)."""
    return name in TORCH_MARKS and not _holds_tensor(value)


@dataclass(frozen=True)
class Inputs:
    """The harness's input tensors as handed to a candidate call: the Python attributes each
    carried and its storage, to say afterwards what the call stored on them or swapped under
    them (state kept outside the design's own tensors)."""

    seen: tuple[tuple[torch.Tensor, frozenset[str], int, int], ...]

    @staticmethod
    def of(values: Sequence[Any]) -> Inputs:
        out = []
        for t in values:
            if isinstance(t, torch.Tensor) and not t.is_sparse and not t.is_meta:
                s = t.untyped_storage()
                out.append((t, frozenset(vars(t)), s.data_ptr(), s.nbytes()))
        return Inputs(tuple(out))

    def tampered(self) -> str | None:
        """What the call left on the inputs, or None (torch's own marks, `TORCH_MARKS`, holding
        no tensor, are not the candidate's state)."""
        for i, (t, names, ptr, nbytes) in enumerate(self.seen):
            added = sorted(k for k, v in vars(t).items() if k not in names and not _torch_mark(k, v))
            if added:
                return (f"the candidate stored attribute(s) {', '.join(added[:4])} on the harness's input tensor "
                        f"{i} (state kept outside the design's own tensors)")
            s = t.untyped_storage()
            if s.data_ptr() != ptr or s.nbytes() != nbytes:
                return (f"the candidate swapped or resized the storage of the harness's input tensor {i} "
                        f"({nbytes} -> {s.nbytes()} bytes)")
        return None


Owner = Literal["candidate", "compile", "harness"]

_STARTED: weakref.WeakKeyDictionary[threading.Thread, tuple[Owner, str]] = weakref.WeakKeyDictionary()
"""Who started each thread since `watch_starts`, and where (`file:line in function`)."""
_SPAWNED: dict[int, tuple[Owner, weakref.ref[subprocess.Popen[Any]]]] = {}
"""Who started each child process through `subprocess.Popen` since `watch_starts`, by pid (with
its `Popen`: a pid whose `Popen` is gone or reaped may be another process's now)."""
_UNSEEN: tuple[Owner, str] = ("candidate", "a thread the harness did not see start")
"""The owner of a thread started before no watch saw it (below Python, say): the candidate's."""
_COMPILE_ENTRIES = frozenset(
    str(Path(_TORCH_DIR, *p)) for p in (("_dynamo", "convert_frame.py"), ("_inductor", "compile_fx.py")))
"""Where torch compiles: dynamo compiling a frame, Inductor compiling a graph."""
_HARNESS_DIR = str(Path(__file__).resolve().parents[3])


@functools.lru_cache(maxsize=4096)
def _real(path: str) -> str:
    return str(Path(path).resolve()) if path and not path.startswith("<") else path


def _owner(frame: FrameType | None, candidate_dir: str) -> tuple[Owner, str]:
    """Who starts a thread from `frame` (the caller of `Thread.start`): the innermost frame
    that decides it is the candidate's code (a file in its directory), torch compiling (which
    may start its compile pool, its progress monitor, its timers: not the candidate's work),
    or the harness's own code, unless candidate code called that harness code; with none of
    them on the stack (a thread's own target), the starting thread's owner."""
    f, found = frame, None
    while f is not None:
        path = _real(f.f_code.co_filename)
        mine = path.startswith(candidate_dir)
        if found is not None:  # the harness's code started it: on the candidate's behalf?
            if mine:
                return "candidate", found[1]
        elif mine or path in _COMPILE_ENTRIES or path.startswith(_HARNESS_DIR):
            found = ("candidate" if mine else "compile" if path in _COMPILE_ENTRIES else "harness",
                     f"{Path(path).name}:{f.f_lineno} in {f.f_code.co_name}")
            if found[0] != "harness":
                return found
        f = f.f_back
    return found or _STARTED.get(threading.current_thread(), _UNSEEN)


def watch_starts(candidate_dir: Path) -> None:
    """From now on, record who starts each `threading.Thread` and each `subprocess.Popen`
    (`_owner`); the threads alive now are the harness's (no candidate code has run). Installed
    before any candidate code is imported, and guarded as harness functions (`Snapshot`)."""
    start = threading.Thread.start
    if getattr(start, "watched", False):
        return
    root = _real(str(candidate_dir))
    for t in threading.enumerate():
        _STARTED[t] = ("harness", "before the worker's watch")

    def watched_start(self: threading.Thread) -> None:
        _STARTED[self] = _owner(sys._getframe(1), root)
        start(self)

    watched_start.watched = True  # type: ignore[attr-defined]
    threading.Thread.start = watched_start  # type: ignore[method-assign]
    spawn = subprocess.Popen.__init__

    def watched_spawn(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        owner, _ = _owner(sys._getframe(1), root)
        spawn(self, *args, **kwargs)
        _SPAWNED[self.pid] = (owner, weakref.ref(self))

    subprocess.Popen.__init__ = watched_spawn  # type: ignore[method-assign]


def spawned_by_candidate(pid: int) -> bool:
    """Whether child process `pid` is the candidate's: one its code started through
    `subprocess` (`_owner`), and any started another way (a fork, `posix_spawn`); torch's
    compile sidecar, started while it compiles, is not."""
    owner, ref = _SPAWNED.get(pid, ("candidate", None))
    popen = ref() if ref is not None else None
    return owner == "candidate" or popen is None or popen.returncode is not None


@dataclass(frozen=True)
class Threads:
    """The threads of this process at one moment: Python's (the objects) and the native count."""

    python: frozenset[threading.Thread]
    native: int

    @staticmethod
    def now() -> Threads:
        return Threads(frozenset(threading.enumerate()), native_threads())

    def left_by_candidate(self) -> str | None:
        """Why the candidate left threads running since this moment, or None: a new Python
        thread it started (or one started by a thread of its own), or more native threads than
        the new Python threads that torch's compiling or the harness started account for."""
        now = Threads.now()
        new = [(t, _STARTED.get(t, _UNSEEN)) for t in now.python - self.python]
        mine = [f"{t.name} (started at {site})" for t, (owner, site) in new if owner == "candidate"]
        counts = f"(python {len(self.python)} -> {len(now.python)}, native {self.native} -> {now.native})"
        if mine:
            return f"the candidate left threads running after a call: {', '.join(mine[:4])} {counts}"
        others = [t for t, (owner, _) in new if owner != "candidate"]
        if now.native > self.native + len(others):
            return (f"the candidate left native threads running after a call {counts}"
                    + (f"; {len(others)} of the new ones are torch's or the harness's" if others else ""))
        return None
