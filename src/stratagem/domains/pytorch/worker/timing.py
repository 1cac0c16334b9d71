"""Owns timing inside the worker: CUDA events on a GPU, perf_counter on the CPU.

GPU protocol per timed call: overwrite an L2-flush buffer (outside the timed region, on the
same stream), record the start event, call, record a stream-end event, synchronize the whole
device, record a device-end event. Both intervals are kept for every call:

- `samples_ms` (start -> stream end) is the runtime reported by default; it is the protocol
  `triton.testing.do_bench` uses, and it agrees with it (benchmarks/RESULTS.md);
- `device_sync_samples_ms` (start -> end after a device-wide synchronize) also counts work a
  candidate left on other streams, at the price of a fixed host round trip, which is
  calibrated on an empty call measured right after every timed call (`sync_overhead_ms`;
  paired, so clock and power-state drift cancel). A device-sync time well above the stream
  time plus that overhead (`unsynced_work_ms`, the median of the paired differences) means
  work escaped the timed stream.

`sync_mode = "device"` reports the device-sync interval instead. Warm-up runs for a time
budget; the repetition count is derived from the measured per-call time and a budget. Every
timed call gets freshly generated inputs (new values at new addresses, made before the start
event), so no call can be answered from an earlier one; warm-up rotates a few input sets.

`time_paired` times a reference and a candidate in alternating blocks (A B, B A, ...) with
exactly this per-call protocol for both, and returns each block's samples; the ratio and its
interval are `core.paired`'s. See docs/timing.md.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from stratagem.core import paired
from stratagem.core.paired import quartiles
from stratagem.worker_api.machine_load import BusyGuard

Fresh = Callable[[int], Sequence[Any]]
"""Builds the inputs of timed call i (new values, new addresses), outside the timed region."""

L2_FLUSH_BYTES_MIN = 256 * 1024 * 1024
"""Flush buffer size floor: several times the largest L2 of current GPUs (H100/H200: 50 MB)."""


def gpu_uuid(device: str) -> str | None:
    """The GPU's UUID as NVML names it (None on the CPU or where torch does not say)."""
    if not device.startswith("cuda"):
        return None
    try:
        return str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except (AttributeError, RuntimeError):
        return None


def summarize(samples_ms: Sequence[float]) -> dict[str, Any]:
    xs = sorted(samples_ms)
    q1, med, q3 = quartiles(xs)
    return {
        "median_ms": med,
        "q1_ms": q1,
        "q3_ms": q3,
        "iqr_ms": q3 - q1,
        "min_ms": xs[0],
        "max_ms": xs[-1],
        "mean_ms": statistics.fmean(xs),
        "n": len(xs),
        "samples_ms": list(samples_ms),
    }


def _reps(estimate_ms: float, cfg: Mapping[str, Any]) -> int:
    budget = float(cfg["budget_ms"])
    n = budget / max(estimate_ms, 1e-6)
    return int(min(max(math.ceil(n), int(cfg["min_reps"])), int(cfg["max_reps"])))


class L2Flusher:
    """Overwrites a buffer larger than the GPU's L2 cache."""

    def __init__(self, device: str) -> None:
        props = torch.cuda.get_device_properties(torch.device(device))
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        self.nbytes = max(L2_FLUSH_BYTES_MIN, 4 * l2)
        self.buffer = torch.empty(self.nbytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def unsynced_work_ms(
    fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], device: str, reps: int = 100,
) -> float:
    """A second, independent estimate of the work left behind the timed stream (a confirmation
    of the side-stream detector before it rejects)."""
    flush = L2Flusher(device)
    stream, dev, overheads = _measure_cuda(fn, arg_sets, reps, flush, None, paired_noop=True)
    return statistics.median(d - s - o for s, d, o in zip(stream, dev, overheads, strict=True))


def _noop() -> None:
    return None


_Sink = Callable[[int, Any, Sequence[Any]], None]
"""Called after timed call i of one block (outside its timed region) with its output and inputs."""

Keep = Callable[[int, int, Any, Sequence[Any]], None]
"""Called after a kept timed call (outside its timed region) with its slot, its index i, its
output and inputs; a later call kept in the same slot replaces it."""


def _measure_cuda(
    fn: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    reps: int,
    flush: L2Flusher | None,
    fresh: Fresh | None = None,
    paired_noop: bool = False,
    keep: tuple[set[int], _Sink] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """(start -> stream end, start -> end after a device synchronize, and with `paired_noop`
    the same sync overhead of an empty call made right after) per call, in ms. `keep`: the
    calls whose outputs are handed back, and where to."""
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(6 if paired_noop else 3)] for _ in range(reps)]
    k = len(arg_sets)
    for i in range(reps):
        args = fresh(i) if fresh is not None else arg_sets[i % k]
        calls: list[tuple[Callable[..., Any], Sequence[Any]]] = [(fn, args)]
        if paired_noop:
            calls.append((_noop, ()))
        for j, (f, a) in enumerate(calls):
            if flush is not None:
                flush()
            ev[i][3 * j].record()
            out = f(*a)
            ev[i][3 * j + 1].record()
            torch.cuda.synchronize()
            ev[i][3 * j + 2].record()
            if j == 0 and keep is not None and i in keep[0]:
                keep[1](i, out, a)
            del out
    torch.cuda.synchronize()
    stream = [e[0].elapsed_time(e[1]) for e in ev]
    dev = [e[0].elapsed_time(e[2]) for e in ev]
    over = [e[3].elapsed_time(e[5]) - e[3].elapsed_time(e[4]) for e in ev] if paired_noop else []
    return stream, dev, over


def _guarded(measure: Callable[[int, int], tuple[list[float], list[float], list[float]]], reps: int,
             per_call_ms: float, cfg: Mapping[str, Any], device: str,
             ) -> tuple[tuple[list[float], list[float], list[float]], dict[str, Any]]:
    """`reps` calls of one program measured in windows (`measure(n, first_call)` times n calls),
    each judged by a `BusyGuard`: a busy window's calls are void and timed again, until `reps`
    calls are quiet or the guard's wait runs out. Returns the quiet calls' samples (all of the
    last window's when none was quiet) and the guard's summary."""
    guard = BusyGuard(device, cfg.get("busy"), gpu_uuid(device))
    chunk = max(1, int(guard.window_s * 1e3 / max(per_call_ms, 1e-6)))
    got: tuple[list[float], list[float], list[float]] = ([], [], [])
    start = 0
    last = got
    while len(got[0]) < reps:
        guard.open()
        last = measure(min(chunk, reps - len(got[0])), start)
        start += len(last[0])
        if guard.close() is None:
            got = (got[0] + last[0], got[1] + last[1], got[2] + last[2])
        if guard.exhausted:
            break
    guard.finish()
    busy = guard.summary(len(got[0]), reps, max(paired.MIN_JUDGED, reps // 2))
    return (got if got[0] else last), busy


def time_callable(
    fn: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    cfg: Mapping[str, Any],
    device: str,
    fresh: Fresh | None = None,
) -> dict[str, Any]:
    """Time `fn` alone (CUDA events on a GPU, perf_counter on the CPU): warm-up rotates
    `arg_sets`, timed calls use `fresh(i)` when given; the summary with raw samples in ms. On a
    GPU, `cfg["sync_mode"]` says which interval is the reported runtime: `stream` (start to the
    end of the call's stream, as do_bench) or `device` (to the end of all device work)."""
    cuda = device.startswith("cuda")
    flush = L2Flusher(device) if cuda and cfg.get("flush_l2", True) else None
    est, calls = _estimate_ms(fn, arg_sets, cfg, device, flush)
    (stream, dev, overheads), busy = _guarded(
        lambda n, start: _block(fn, arg_sets, n, device, flush, fresh, start), _reps(est, cfg), est, cfg, device)
    if not cuda:
        out = summarize(stream)
        out.update(method="perf_counter", warmup_calls=calls, input_sets=len(arg_sets), l2_flush_bytes=0, busy=busy)
        return out
    sync_mode = str(cfg.get("sync_mode", "stream"))
    out = summarize(dev if sync_mode == "device" else stream)
    out.update(
        method=f"cuda_event/{sync_mode}",
        warmup_calls=calls,
        input_sets=len(arg_sets),
        l2_flush_bytes=flush.nbytes if flush else 0,
        stream_median_ms=statistics.median(stream),
        device_sync_median_ms=statistics.median(dev),
        device_sync_samples_ms=dev if sync_mode != "device" else stream,
        sync_overhead_ms=statistics.median(overheads),
        unsynced_work_ms=statistics.median([d - s - o for s, d, o in zip(stream, dev, overheads, strict=True)]),
        busy=busy,
    )
    return out


# -- paired timing ------------------------------------------------------------------------


def _estimate_ms(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], cfg: Mapping[str, Any],
                 device: str, flush: L2Flusher | None) -> tuple[float, int]:
    """Warm `fn` up for the warm-up budget, and at least through the input sets twice and once
    more (at least 3 calls): a program that waits for its inputs to repeat (a benchmark loop's
    rotation) before it starts serving stored answers sees them repeat here on any machine,
    however loaded, and its stored answers then meet the timed calls' fresh inputs. Returns
    (per-call estimate, calls)."""
    k = len(arg_sets)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    t0, calls, est = time.perf_counter(), 0, []
    least = max(3, 2 * k + 1)
    while calls < least or (time.perf_counter() - t0) * 1e3 < float(cfg["warmup_ms"]):
        s = time.perf_counter()
        fn(*arg_sets[calls % k])
        if cuda:
            torch.cuda.synchronize()
        est.append((time.perf_counter() - s) * 1e3)
        calls += 1
        if calls >= 10_000:
            break
    if cuda:
        stream, _, _ = _measure_cuda(fn, arg_sets, min(5, max(1, calls)), flush)
        return statistics.median(stream), calls
    return statistics.median(est[-5:]), calls


def _block(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], n: int, device: str,
           flush: L2Flusher | None, fresh: Fresh | None, start: int,
           keep: tuple[set[int], _Sink] | None = None) -> tuple[list[float], list[float], list[float]]:
    """n timed calls of `fn` (inputs `fresh(start + i)`): (reported, device-sync, sync overhead)."""
    make = (lambda i: fresh(start + i)) if fresh is not None else None  # noqa: E731
    if device.startswith("cuda"):
        return _measure_cuda(fn, arg_sets, n, flush, make, paired_noop=True, keep=keep)
    k = len(arg_sets)
    times = []
    for i in range(n):
        args = make(i) if make is not None else arg_sets[(start + i) % k]
        s = time.perf_counter()
        out = fn(*args)
        times.append((time.perf_counter() - s) * 1e3)
        if keep is not None and i in keep[0]:
            keep[1](i, out, args)
        del out
    return times, [], []


def _kept_after(candidate: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], n: int, device: str,
                flush: L2Flusher | None, fresh: Fresh | None, counter: int, rng: secrets.SystemRandom,
                keep: Keep, slots: range) -> None:
    """The timed-outputs slots a timing cut short (by a busy machine) left empty, filled by
    candidate blocks run after it like any other (their times unused): the check never loses
    its calls to the busy guard."""
    for slot in slots:
        _block(candidate, arg_sets, n, device, flush, fresh, counter, _sink(keep, slot, n, counter, rng))
        counter += n


def _sink(keep: Keep | None, slot: int | None, n: int, base: int,
          rng: secrets.SystemRandom) -> tuple[set[int], _Sink] | None:
    """For a block of n calls starting at call `base` whose draw is `slot`: one call of it,
    drawn at random, handed to `keep` for that slot (None: nothing kept from this block)."""
    if keep is None or slot is None:
        return None
    return {rng.randrange(n)}, lambda i, out, args: keep(slot, base + i, out, args)


def _kept_slot(block: int, slots: int, rng: secrets.SystemRandom) -> int | None:
    """Which timed-outputs slot candidate block `block` (0, 1, ...) fills, if any: reservoir
    sampling, so whenever the timing stops the kept blocks are a uniform draw from the blocks
    it ran (the first `slots` fill the slots; block b replaces a random one with probability
    slots / (b + 1))."""
    if block < slots:
        return block
    j = rng.randrange(block + 1)
    return j if j < slots else None


PAIRS_MIN = 10
"""Fewest block pairs of a paired timing (slow programs: one call per block)."""


def pair_count(est_ms: float, cfg: Mapping[str, Any]) -> int:
    """Block pairs: `pairs`, or fewer (down to PAIRS_MIN) when one call of the slower program
    takes more than its share of the budget, so a slow program does not take minutes."""
    most = int(cfg.get("pairs", 40))
    fit = int(float(cfg["budget_ms"]) // max(est_ms, 1e-6))
    return max(min(most, fit), min(PAIRS_MIN, most))


def block_calls(estimate_ms: float, cfg: Mapping[str, Any], pairs: int) -> int:
    """Calls per block: the program's share of the budget over the pairs, within the
    repetition bounds (at least one call per block)."""
    per = float(cfg["budget_ms"]) / pairs / max(estimate_ms, 1e-6)
    lo = math.ceil(int(cfg["min_reps"]) / pairs)
    hi = max(1, int(cfg["max_reps"]) // pairs)
    return int(max(1, min(max(math.ceil(per), lo), hi)))


def _settled(blocks: Mapping[str, list[list[float]]], rules: paired.StabilityRules, target: float,
             expect: float | None) -> bool:
    """Whether the quiet pairs so far meet `core.paired.settled`'s stop rule."""
    ratios = paired.pair_ratios(blocks["reference"], blocks["candidate"])
    flat = {k: [x for b in v for x in b] for k, v in blocks.items()}
    return paired.settled(ratios, flat["reference"], flat["candidate"], rules, target, expect) is not None


def time_paired(
    reference: Callable[..., Any],
    candidate: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    cfg: Mapping[str, Any],
    device: str,
    fresh: Fresh | None = None,
    keep: Keep | None = None,
    keep_count: int = 0,
    reference_expect_ms: float | None = None,
) -> dict[str, Any]:
    """Time `reference` and `candidate` in alternating blocks; return both summaries, the
    per-pair ratios and the paired speedup (reference time / candidate time) with its interval.

    Each block pair runs A then B, the next B then A (so a linear drift cancels too). Every
    call gets the same protocol: flush (GPU), fresh inputs, start, call, end. `keep` receives
    the output and inputs of `keep_count` timed candidate calls, one in each of `keep_count`
    candidate blocks drawn uniformly (reservoir sampling, from OS entropy, never exposed) from
    the blocks the timing ran, so they can be checked afterwards.

    The timing stops before `pairs` once the quiet pairs meet the stop rule
    (`core.paired.settled` with `target_halfwidth` from `cfg`, looked at after `PAIRS_MIN`
    pairs and then at each doubling: `core.paired.looks`); `stop` in the result says which
    (`settled` or `planned`) and `planned_pairs` how many it would have run.

    The pairs are judged in windows of wall time (`machine_load.BusyGuard`, the `busy`
    section of `cfg`): a window in which the machine was busy (the timing thread waited for a
    CPU, another process used the GPU, or the reference ran far slower than its quiet
    `reference_expect_ms`) is void and timed again, until `pairs` pairs are quiet or the
    guard's wait runs out; `busy` in the result says what happened, and `busy.busy` is true
    when too few pairs were quiet to be a measurement.
    """
    cuda = device.startswith("cuda")
    sync_mode = str(cfg.get("sync_mode", "stream"))
    flush = L2Flusher(device) if cuda and cfg.get("flush_l2", True) else None
    t_start = time.perf_counter()
    est_ref, warm_ref = _estimate_ms(reference, arg_sets, cfg, device, flush)
    est_cand, warm_cand = _estimate_ms(candidate, arg_sets, cfg, device, flush)
    pairs = pair_count(max(est_ref, est_cand), cfg)
    n_ref, n_cand = block_calls(est_ref, cfg, pairs), block_calls(est_cand, cfg, pairs)
    names = ("reference", "candidate")
    blocks: dict[str, list[list[float]]] = {n: [] for n in names}
    dev: dict[str, list[float]] = {n: [] for n in names}
    over: dict[str, list[float]] = {n: [] for n in names}
    progs = {"reference": (reference, n_ref), "candidate": (candidate, n_cand)}
    elsewhere = {n: [0.0, 0.0] for n in names}  # CPU seconds on the process's other threads, wall seconds
    counter = 0
    rng = secrets.SystemRandom()
    slots = keep_count if keep is not None else 0
    guard = BusyGuard(device, cfg.get("busy"), gpu_uuid(device))
    expect = float(reference_expect_ms) if reference_expect_ms else None
    rules = paired.stability_rules(cfg.get("stability"))
    slow = 1 + rules.reference_drift_max
    target = float(cfg.get("target_halfwidth", 0.0))
    looks = paired.looks(PAIRS_MIN, pairs)
    stop = "planned"
    window: list[dict[str, tuple[list[float], list[float], list[float]]]] = []
    p = 0
    guard.open()
    while len(blocks["reference"]) < pairs:
        order = names if p % 2 == 0 else names[::-1]
        timed: dict[str, tuple[list[float], list[float], list[float]]] = {}
        for name in order:
            fn, n = progs[name]
            slot = _kept_slot(p, slots, rng) if name == "candidate" else None
            c0, w0 = other_threads_cpu_s(), time.perf_counter()
            rep, d, o = _block(fn, arg_sets, n, device, flush, fresh, counter, _sink(keep, slot, n, counter, rng))
            elsewhere[name][0] += other_threads_cpu_s() - c0
            elsewhere[name][1] += time.perf_counter() - w0
            counter += n
            timed[name] = (d, rep, o) if cuda and sync_mode == "device" else (rep, d, o)
        window.append(timed)
        p += 1
        have = len(blocks["reference"]) + len(window)
        if not (guard.due() or have >= pairs or (looks and have >= looks[0])):
            continue
        ref_ms = statistics.median(x for t in window for x in t["reference"][0])
        also = (f"the reference took {ref_ms:.4g} ms a call, over {slow:.2g}x its quiet {expect:.4g} ms"
                if expect and ref_ms > slow * expect else None)
        if guard.close(also) is None:
            for t in window:
                for name in names:
                    rep, d, o = t[name]
                    blocks[name].append(rep)
                    dev[name] += d
                    over[name] += o
        window = []
        if looks and len(blocks["reference"]) >= looks[0]:
            looks = [k for k in looks if k > len(blocks["reference"])]
            if _settled(blocks, rules, target, expect):
                stop = "settled"
                break
        if guard.exhausted:
            break
        guard.open()
    guard.finish()
    if keep is not None:
        _kept_after(candidate, arg_sets, n_cand, device, flush, fresh, counter, rng, keep, range(min(p, slots), slots))
    measured = len(blocks["reference"])
    busy = guard.summary(measured, pairs, measured if stop == "settled" else max(paired.MIN_JUDGED, pairs // 2))
    if not blocks["reference"]:  # nothing quiet: the summaries below need samples, kept apart
        for t in window or [timed]:
            for name in names:
                blocks[name].append(t[name][0])
                dev[name] += t[name][1]
                over[name] += t[name][2]
    ratios = paired.pair_ratios(blocks["reference"], blocks["candidate"])
    ratio = paired.bootstrap_median(ratios, seed=len(ratios))
    out: dict[str, Any] = {
        "method": (f"cuda_event/{sync_mode}" if cuda else "perf_counter") + "/paired",
        "pairs": len(ratios),
        "planned_pairs": pairs,
        "stop": stop,
        "target_halfwidth": target,
        "calls_per_block": {"reference": n_ref, "candidate": n_cand},
        "warmup_calls": {"reference": warm_ref, "candidate": warm_cand},
        "pair_ratios": ratios,
        "speedup": ratio.to_json(),
        "input_sets": len(arg_sets),
        "l2_flush_bytes": flush.nbytes if flush else 0,
        "wall_s": time.perf_counter() - t_start,
        "busy": busy,
        "other_threads_cores": {n: round(cpu / max(wall, 1e-9), 4) for n, (cpu, wall) in elsewhere.items()},
    }
    for name in names:
        out[name] = _program_summary(blocks[name], dev[name], over[name], cuda, sync_mode)
    return out


def other_threads_cpu_s() -> float:
    """CPU seconds this process has spent on threads other than the calling one (the timing
    thread): the design's own thread pools, the harness's few light threads, work a call left
    running after it returned."""
    return time.process_time() - time.thread_time()


def _program_summary(blocks: list[list[float]], dev: list[float], over: list[float], cuda: bool,
                     sync_mode: str) -> dict[str, Any]:
    """One program's summary of a paired timing: its samples, block medians, and on a GPU the
    device-sync interval, the sync overhead and the work left behind the timed stream."""
    samples = [x for b in blocks for x in b]
    s = summarize(samples)
    s["block_medians_ms"] = [statistics.median(b) for b in blocks]
    if cuda:
        s["device_sync_samples_ms"] = dev
        s["device_sync_median_ms"] = statistics.median(dev)
        s["sync_overhead_ms"] = statistics.median(over)
        stream, devs = (dev, samples) if sync_mode == "device" else (samples, dev)
        s["stream_median_ms"] = statistics.median(stream)
        s["unsynced_work_ms"] = statistics.median(d - t - o for t, d, o in zip(stream, devs, over, strict=True))
    return s
