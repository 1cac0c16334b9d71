"""Owns the worker side of the writers' `profile` tool (`PROBE_GRAPHS["profile"]`): one warm
call of the loaded design profiled, never timed against anything and never a verdict.

What each row records is where the time goes and the work done in it, for the parent to set
beside the device's peaks (`domains/pytorch/kernel_roofline.py`): on a GPU each kernel (by
name: its device time, launches, and the work of the operator that launched it: the bytes of
its tensor inputs, from the shapes and dtypes torch's profiler records, and the FLOPs the
profiler estimates for the operators it knows: matmuls, convolutions, adds and multiplies);
on the CPU each of torch's operators (its own CPU time and the same work, for an operator that
calls no other or whose FLOPs the profiler counts).
A kernel launched outside any operator that records shapes (a Triton or CUDA extension kernel
called from Python) has its time and no work. The heaviest `TOP` rows are kept, the rest summed
into one row, and the total, so the parent can set it beside the roofline floor.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import runtime

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext

TOP = 12
"""Rows (kernels on a GPU, operators on the CPU) kept in a profile, the heaviest first; the rest
are summed into one."""

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2, "float16": 2,
               "float32": 4, "float64": 8, "int": 4, "long int": 8, "long": 8, "int64": 8, "int32": 4,
               "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
               "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
"""Bytes per element of the dtype names torch's profiler records (`input_dtypes`)."""

NO_DATA = frozenset({
    "aten::as_strided", "aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape", "aten::t",
    "aten::transpose", "aten::permute", "aten::expand", "aten::expand_as", "aten::unsqueeze", "aten::squeeze",
    "aten::slice", "aten::select", "aten::narrow", "aten::alias", "aten::detach", "aten::lift_fresh",
    "aten::resolve_conj", "aten::resolve_neg", "aten::empty", "aten::empty_like", "aten::empty_strided",
    "aten::unbind", "aten::split", "aten::chunk", "aten::flatten", "aten::unflatten", "aten::contiguous",
    "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_nonzero", "aten::item",
})
"""Operators that move no data of their own (views, metadata, allocation; `reshape` and
`contiguous` copy only through a `copy_` or `clone` recorded on its own): no work is counted
for them, so their short times read as no rate rather than an impossible one."""


def run_profile(w: StageContext) -> dict[str, Any]:
    """Profile one call of the candidate after a warm-up call, on the first seed's inputs."""
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    inputs = w.make_inputs(p, int(w.req["seeds"][0]))
    with w.hold("shared"), torch.no_grad():
        w.call_candidate(p.candidate, runtime.clone_inputs(inputs))  # builds, autotuning, caches
    t0 = time.perf_counter()
    from torch.autograd import profiler

    cuda = w.device.startswith("cuda")
    prof: Any = profiler.profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True,
                                 record_shapes=True, with_flops=True)
    try:
        args = runtime.clone_inputs(inputs)
        with w.hold("exclusive"), torch.no_grad():
            if cuda:
                torch.cuda.synchronize()
            with prof:
                c0 = time.perf_counter()
                w.call_candidate(p.candidate, args)
                if cuda:
                    torch.cuda.synchronize()
                call_ms = (time.perf_counter() - c0) * 1e3
        events = list(prof.function_events)
        with_dtypes(events, prof)
    except Exception as e:  # noqa: BLE001 - a profile that cannot be taken is only missing
        return {"device": "cuda" if cuda else "cpu", "rows": [], "source": "torch.profiler",
                "note": f"no profile: {runtime.one_line(e)}"}
    rows = kernel_rows(events) if cuda else operator_rows(events)
    return {"device": "cuda" if cuda else "cpu", **table(rows), "call_ms": round(call_ms, 4), "unit": "us",
            "source": "torch.profiler", "profile_s": round(time.perf_counter() - t0, 4)}


def with_dtypes(events: Sequence[Any], prof: Any) -> None:
    """Give each event its inputs' dtype names where this torch's events lack them (before
    torch 2.12 `FunctionEvent` has no `input_dtypes`; the profiler's own results do, by
    correlation id), so the bytes an operator moves can be counted."""
    if not events or hasattr(events[0], "input_dtypes"):
        return
    try:
        by_id = {int(k.correlation_id()): list(k.dtypes()) for k in prof.kineto_results.events()}
    except Exception:  # noqa: BLE001 - without dtypes the rows keep their times alone
        return
    for e in events:
        e.input_dtypes = by_id.get(int(getattr(e, "id", -1)), [])


def work_of(evt: Any) -> tuple[int | None, int | None, str | None]:
    """(bytes of the operator's tensor inputs, its FLOPs, its first input's dtype): None where
    the profiler recorded none (no shapes; no FLOP formula)."""
    if str(getattr(evt, "name", "")) in NO_DATA:
        return None, None, None
    shapes: Sequence[Any] = getattr(evt, "input_shapes", None) or ()
    dtypes: Sequence[Any] = getattr(evt, "input_dtypes", None) or ()
    total, dtype = 0, None
    for i, shape in enumerate(shapes):
        name = str(dtypes[i]) if i < len(dtypes) else ""
        if not shape or not isinstance(shape, list | tuple) or name not in DTYPE_BYTES:
            continue
        total += math.prod(int(d) for d in shape) * DTYPE_BYTES[name]
        dtype = dtype or name
    flops = int(getattr(evt, "flops", 0) or 0)
    return (total or None), (flops or None), dtype


def _launcher(evt: Any) -> Any:
    """The nearest operator at or above `evt` whose input shapes the profiler recorded."""
    op = evt
    while op is not None and not any(getattr(op, "input_shapes", None) or ()):
        op = getattr(op, "cpu_parent", None)
    return op


def _own_kernels(events: list[Any]) -> dict[int, Counter[tuple[str, float]]]:
    """Each event's kernels that none of its descendants also carries: a launch that the
    profiler lists under an operator and again under one it called counts once, at the
    innermost (on an H100 with torch 2.11 the reference's softmax and GEMM kernels read as
    two launches of one call each, twice their eager times)."""
    children: dict[int, list[Any]] = defaultdict(list)
    for e in events:
        if (parent := getattr(e, "cpu_parent", None)) is not None:
            children[id(parent)].append(e)
    below: dict[int, Counter[tuple[str, float]]] = {}
    own: dict[int, Counter[tuple[str, float]]] = {}

    def visit(e: Any) -> Counter[tuple[str, float]]:
        if id(e) not in below:
            mine = Counter((str(k.name), float(k.duration)) for k in getattr(e, "kernels", None) or ())
            sub: Counter[tuple[str, float]] = Counter()
            for c in children[id(e)]:
                sub += visit(c)
            own[id(e)], below[id(e)] = mine - sub, mine | sub
        return below[id(e)]

    for e in events:
        visit(e)
    return own


def kernel_rows(events: Iterable[Any]) -> list[list[Any]]:
    """GPU kernels by name: [name, device us, launches, bytes, FLOPs, dtype]; each kernel carries
    its launching operator's work in its share of that operator's kernel time."""
    events = list(events)
    own = _own_kernels(events)
    launches: list[tuple[int, str, float, Any]] = []
    op_time: dict[int, float] = {}
    for e in events:
        for (name, us), n in own[id(e)].items():
            op = _launcher(e)
            key = id(op) if op is not None else -1
            launches.extend([(key, name, us, op)] * n)
            op_time[key] = op_time.get(key, 0.0) + us * n
    rows: dict[str, list[Any]] = {}
    for key, name, us, op in launches:
        nbytes, flops, dtype = work_of(op) if op is not None else (None, None, None)
        share = us / op_time[key] if op_time.get(key) else 0.0
        r = rows.setdefault(name, [name, 0.0, 0, None, None, dtype])
        r[1] += us
        r[2] += 1
        if nbytes is not None:
            r[3] = (r[3] or 0) + nbytes * share
        if flops is not None:
            r[4] = (r[4] or 0) + flops * share
    return list(rows.values())


def _below_has_work(e: Any) -> bool:
    return any(work_of(c)[0] or work_of(c)[1] or _below_has_work(c) for c in getattr(e, "cpu_children", None) or ())


def operator_rows(events: Iterable[Any]) -> list[list[Any]]:
    """torch's operators by name: [name, own CPU us, calls, bytes, FLOPs, dtype]. The work is
    an operator's where the profiler has its FLOPs (the matmul `aten::addmm`) or where none of
    the operators it calls records work (`aten::div` converting a scalar); an operator whose
    callees do the work (`aten::linear`, `aten::relu`) has none of its own, so its short own
    time reads as no rate rather than an impossible one."""
    rows: dict[str, list[Any]] = {}
    for e in events:
        if str(getattr(e, "device_type", "")).upper().endswith("CUDA"):
            continue
        nbytes, flops, dtype = work_of(e)
        if not flops and _below_has_work(e):
            nbytes = None
        r = rows.setdefault(str(e.key), [str(e.key), 0.0, 0, None, None, dtype])
        r[1] += float(e.self_cpu_time_total)
        r[2] += 1
        if nbytes is not None:
            r[3] = (r[3] or 0) + nbytes
        if flops is not None:
            r[4] = (r[4] or 0) + flops
    return [r for r in rows.values() if r[1] > 0]


def table(rows: list[list[Any]], top: int = TOP) -> dict[str, Any]:
    """The heaviest `top` rows (times rounded), the rest summed as [count, us, bytes, FLOPs],
    and the total time."""
    rows = sorted(rows, key=lambda r: -r[1])
    kept = [[r[0], round(r[1], 3), r[2], None if r[3] is None else int(r[3]), None if r[4] is None else int(r[4]), r[5]]
            for r in rows[:top]]
    rest = rows[top:]
    return {"rows": kept,
            "rest": [len(rest), round(sum(r[1] for r in rest), 3), int(sum(r[3] or 0 for r in rest)),
                     int(sum(r[4] or 0 for r in rest))] if rest else None,
            "total_us": round(sum(r[1] for r in rows), 3)}

