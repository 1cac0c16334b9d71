"""Owns running KernelBench programs inside the worker: modules, models, inputs, errors.

Worker-side only (imports torch). The reference and the candidate are loaded as two separate
modules: the candidate never sees the reference's namespace.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib.util
import random
import re
import sys
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REFERENCE_MODULE = "stratagem_reference"
CANDIDATE_MODULE = "stratagem_candidate"
TRACEBACK_CHARS = 4000


def tail(text: str, limit: int = TRACEBACK_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def format_exception(exc: BaseException) -> str:
    return tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def classify_exception(exc: BaseException) -> str:
    """Map an exception raised by candidate code to a failure kind."""
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return "oom"
    text = f"{type(exc).__name__}: {exc}"
    if "out of memory" in text.lower() or "can't allocate memory" in text:
        return "oom"
    accel = getattr(torch, "AcceleratorError", None)
    if (accel is not None and isinstance(exc, accel)) or "CUDA error" in text:
        return "cuda_error"
    return "exception"


def problem_kind(exc: BaseException) -> str:
    """The failure kind of the problem's own code (the reference, `get_inputs()`) raising
    `exc`: `problem_error`, or `oom` when the memory ran out, which on a shared device is not
    the problem's fault (other workers, the judge, other runs hold some: a worker that ran out
    runs again alone, `evaluation/submit.py`)."""
    return "oom" if classify_exception(exc) == "oom" else "problem_error"


_GPU_ONLY = re.compile(
    r"No module named '(triton|cupy|pycuda|cuda)\b|CUDA_HOME|Torch not compiled with CUDA|Found no NVIDIA driver|"
    r"no CUDA GPUs are available|nvcc\b.*not found|cannot find -lcuda|libcuda\.so|cuda_runtime|"
    r"Cannot find a working triton installation|0 active drivers")


def needs_gpu(exc: BaseException, device: str) -> bool:
    """On the CPU, an exception that says the code needs a GPU or its toolchain (Triton,
    CUDA sources, `.cuda()`): the candidate is not wrong, it cannot run here."""
    if device.startswith("cuda"):
        return False
    text = f"{type(exc).__name__}: {exc}"
    return bool(_GPU_ONLY.search(text)) or bool(_GPU_ONLY.search(format_exception(exc)[-2000:]))


def one_line(exc: BaseException, limit: int = 300) -> str:
    msg = str(exc).strip().splitlines()
    first = msg[-1] if msg and type(exc).__name__ == "CalledProcessError" else (msg[0] if msg else "")
    line = f"{type(exc).__name__}: {first}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def load_module(name: str, source: str, directory: Path, filename: str) -> types.ModuleType:
    """Write `source` to `directory/filename` and import it as module `name`.

    A real file is needed: Triton's `@jit` reads kernel source with `inspect`.
    """
    path = directory / filename
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def with_constants(source: str, values: Mapping[str, Any]) -> str:
    """`source` with the top-level assignments of the names in `values` set to those values,
    so that what the module derives from them at import follows (KernelBench's
    `input_shape = (num_classes,)` after `num_classes = 4096`): setting the attribute on an
    imported module changes the name but not what was computed from it. A name the source
    never assigns at the top level is appended (set after import, as before)."""
    tree = ast.parse(source)
    seen: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id in values]
        if names and len(targets) == 1:
            node.value = ast.copy_location(ast.Constant(values[names[0]]), node.value)  # type: ignore[union-attr]
            seen.add(names[0])
    tree.body.extend(ast.parse(f"{k} = {v!r}").body[0] for k, v in values.items() if k not in seen)
    return ast.unparse(ast.fix_missing_locations(tree))


def device_context(device: str) -> Any:
    """Default-device context: `torch.rand(...)` in `get_inputs()` then allocates there."""
    return torch.device(device)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def detach_copy(out: Any) -> Any:
    """A copy of an output (tensors cloned, sequences rebuilt) that later calls cannot change."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, list | tuple):
        return type(out)(detach_copy(x) for x in out)
    return out


def free_memory() -> None:
    """Collect garbage between calls. Freed blocks stay in torch's caching allocator for the next
    trial: returning them to the driver (empty_cache) and allocating again costs more."""
    gc.collect()


def reset_compiled() -> None:
    """Forget everything torch.compile compiled in this process (dynamo's code caches, its
    automatic-dynamic shape memory, CUDA graph trees); the next call of a compiled function
    compiles afresh (Inductor's on-disk caches still serve it).

    A no-op when dynamo was never imported: nothing was compiled, and importing it only to
    reset it costs seconds (about 7 s of the shapes stage on an H200, 0.7 s on a CPU)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return
    with contextlib.suppress(Exception):
        dynamo.reset()


def seed_all(seed: int) -> None:
    """Seed every global generator a problem's `get_inputs()` or `Model` may draw from: torch's
    (CPU and CUDA), Python's `random` and numpy's, so the same seed gives the same values in
    every process (the worker, the judge, a baseline worker)."""
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:  # loaded by torch in practice; never imported here for its own sake
        np.random.seed(seed % 2**32)


def init_inputs(module: types.ModuleType, seed: int, device: str) -> list[Any]:
    """Call the problem's `get_init_inputs()` seeded, under the default-device context."""
    seed_all(seed)
    with device_context(device):
        return list(module.get_init_inputs())


@dataclass
class Programs:
    """The loaded reference and candidate, instantiated on the device."""

    reference_module: types.ModuleType
    reference: torch.nn.Module
    init_inputs: list[Any]
    candidate_module: types.ModuleType | None = None
    candidate: torch.nn.Module | None = None


def make_inputs(module: types.ModuleType, seed: int, device: str) -> list[Any]:
    """Call the problem's `get_inputs()` seeded, creating tensors directly on `device`."""
    seed_all(seed)
    with device_context(device):
        inputs = list(module.get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def inputs_nbytes(inputs: Sequence[Any]) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of an output (nested lists and tuples walked in order; anything else skipped)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for x in out for t in tensors(x)]
    return []


def output_nbytes(out: Any) -> int:
    """Bytes of the tensors in an output or an argument list (nested sequences included)."""
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, list | tuple):
        return sum(output_nbytes(x) for x in out)
    return 0


def cap_memory(device: str, fraction: float | None) -> None:
    """Hold this process to `fraction` of the GPU's memory (None: no cap)."""
    if fraction is not None and device.startswith("cuda"):
        torch.cuda.set_per_process_memory_fraction(float(fraction), torch.device(device))


def free_bytes(device: str, fraction: float | None = None) -> int:
    """What this process can still allocate on `device`: the device's free memory plus what
    torch's allocator keeps cached, within the per-process cap when one is set."""
    if not device.startswith("cuda"):
        return 1 << 62
    free, total = torch.cuda.mem_get_info()
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    room = free + reserved - allocated
    if fraction is not None:
        room = min(room, int(float(fraction) * total) - allocated)
    return max(0, room)


def instantiate(cls: Callable[..., Any], init_inputs: Sequence[Any], seed: int, device: str) -> Any:
    """Build a model with the same seed as its counterpart, so parameters match."""
    seed_all(seed)
    with device_context(device):
        model = cls(*init_inputs)
    return model.to(device)
