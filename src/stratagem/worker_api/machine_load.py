"""Owns seeing whether the machine was busy while something was timed: what else used the
cores and the GPU a timing runs on, over a window of wall time, read from the kernel and the
GPU driver (no third-party package: the worker side of every domain imports it).

A timing on a shared machine is only worth a ratio when nothing else competed for what it
timed. Pairing cancels load that slows both programs alike; load that slows one program more
than the other (a thread pool waiting at barriers, a launch-bound program losing its core)
does not cancel, and the ratio then depends on the machine's state, not on the code. So each
window of a timing is read here and judged:

- the timing thread's wait for a CPU (`run_delay` in /proc/thread-self/schedstat): time it
  was ready to run and another task had its core, which is exactly the slowdown a timed call
  suffers from other work; this is the deciding CPU measure, on every device (a GPU program
  waiting for its core launches late);
- other processes' use of the cores this process may run on (/proc/stat, less this process's
  own CPU time) and the hypervisor's steal on them: what was seen, for the message, and
  steal decides too (a stolen core is invisible to run_delay);
- on a GPU, other processes' SM utilization on the device (NVML's per-process samples,
  through the driver's libnvidia-ml with ctypes), when the driver reports them.

Standard library only; every reading degrades to "unknown" (None) where the kernel or the
driver does not offer it, and an unknown reading never makes a window busy.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BusyRules:
    """When a window of a timing counts as busy (fractions of the window's wall time)."""

    run_delay_max: float = 0.05
    """The timing thread waited for a CPU longer than this share of the window."""
    steal_max: float = 0.25
    """The hypervisor took the timing's cores for longer than this share (per core)."""
    gpu_other_max: float = 5.0
    """Other processes kept the GPU's SMs busy above this utilization (percent, summed)."""

    @classmethod
    def of(cls, cfg: Any) -> BusyRules:
        raw = dict(cfg or {})
        return cls(**{k: float(raw[k]) for k in ("run_delay_max", "steal_max", "gpu_other_max") if k in raw})


@dataclass(frozen=True)
class LoadWindow:
    """What the machine did during one window of wall time."""

    wall_s: float
    run_delay_share: float | None = None
    """Share of the window the timing thread waited for a CPU (None: not readable)."""
    others_cores: float | None = None
    """CPU time of other processes on this process's cores, in cores (1.0: one core's worth)."""
    steal_share: float | None = None
    """The hypervisor's steal on those cores, as a share of the window per core."""
    gpu_others: dict[int, float] = field(default_factory=dict)
    """pid -> mean SM utilization (percent) of other processes on the GPU, when sampled."""

    def busy(self, rules: BusyRules) -> str | None:
        """What made this window busy, in words; None when it was quiet (or unknown)."""
        why = []
        if self.run_delay_share is not None and self.run_delay_share > rules.run_delay_max:
            why.append(f"the timing thread waited for a CPU {self.run_delay_share:.0%} of the time "
                       f"(limit {rules.run_delay_max:.0%})")
        if self.steal_share is not None and self.steal_share > rules.steal_max:
            why.append(f"the hypervisor took {self.steal_share:.0%} of the timing's cores")
        gpu = sum(self.gpu_others.values())
        if gpu > rules.gpu_other_max:
            pids = ", ".join(f"pid {p} at {u:.0f}%" for p, u in sorted(self.gpu_others.items())[:4])
            why.append(f"other processes used the GPU's SMs ({pids})")
        if not why:
            return None
        if self.others_cores is not None and self.others_cores >= 0.05:
            why.append(f"other processes used {self.others_cores:.1f} of this process's "
                       f"{usable_cores()} cores")
        return "; ".join(why)

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return round(x, 4) if x is not None else None

        return {"wall_s": round(self.wall_s, 4), "run_delay_share": r(self.run_delay_share),
                "others_cores": r(self.others_cores), "steal_share": r(self.steal_share),
                "gpu_others": {str(k): round(v, 1) for k, v in self.gpu_others.items()}}


def usable_cores() -> int:
    """The cores this process may run on (its affinity; the machine's where it has none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def _run_delay_ns(fd: int | None) -> int | None:
    if fd is None:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cpu_ticks(cores: frozenset[int]) -> tuple[float, float] | None:
    """(busy ticks, steal ticks) summed over `cores`, from /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return None
    busy = steal = 0.0
    for line in lines:
        if not line.startswith(b"cpu") or line.startswith(b"cpu "):
            continue
        parts = line.split()
        try:
            n = int(parts[0][3:])
        except ValueError:
            continue
        if n not in cores:
            continue
        v = [float(x) for x in parts[1:]]
        # user nice system idle iowait irq softirq steal ...
        busy += v[0] + v[1] + v[2] + (v[5] if len(v) > 5 else 0) + (v[6] if len(v) > 6 else 0)
        steal += v[7] if len(v) > 7 else 0.0
    return busy, steal


class LoadProbe:
    """Reads what the machine did between `start()` and `stop()`, from the calling thread
    (open it on the thread that times). `device`: `cpu` or `cuda[:N]` (the device the
    timing uses; the GPU is read through NVML when the driver offers per-process samples)."""

    def __init__(self, device: str = "cpu", gpu_uuid: str | None = None) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        try:
            self._cores = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._cores = frozenset()
        self._gpu = _Nvml.open(gpu_uuid) if device.startswith("cuda") and gpu_uuid else None
        self._t0 = 0.0
        self._d0: int | None = None
        self._c0: tuple[float, float] | None = None
        self._p0 = 0.0
        self._g0 = 0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._d0 = _run_delay_ns(self._fd)
        self._c0 = _cpu_ticks(self._cores) if self._cores else None
        self._p0 = time.process_time()
        self._g0 = self._gpu.now_us() - NVML_LOOKBACK_US if self._gpu is not None else 0

    def stop(self) -> LoadWindow:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        d1 = _run_delay_ns(self._fd)
        c1 = _cpu_ticks(self._cores) if self._cores else None
        own = time.process_time() - self._p0
        delay = (d1 - self._d0) / 1e9 / wall if d1 is not None and self._d0 is not None else None
        others = steal = None
        if c1 is not None and self._c0 is not None:
            others = max(0.0, ((c1[0] - self._c0[0]) * _TICK_S - own) / wall)
            steal = (c1[1] - self._c0[1]) * _TICK_S / wall / max(1, len(self._cores))
        gpu = self._gpu.others_since(self._g0) if self._gpu is not None else {}
        return LoadWindow(wall, delay, others, steal, gpu)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class _Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


NVML_LOOKBACK_US = 1_000_000
"""How far before a window the GPU's per-process samples are read. A driver samples each
process about once a second and may report only the latest sample (580 on an H200), so a 50 ms
window read from its own start saw a second process in 13 of 60 windows it shared; read from
one second before, in 60 of 60, and in none after that process ended (its samples go with it)."""


class _Process(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class _Nvml:
    """Other processes' SM utilization on one GPU, from the driver's NVML library."""

    _lib: Any = None

    def __init__(self, lib: Any, handle: ctypes.c_void_p) -> None:
        self.lib, self.handle = lib, handle
        self.own = {os.getpid(), os.getppid()}
        self.visible = False
        """NVML's pids are known to be this PID namespace's (`pids_visible`, once seen)."""

    @classmethod
    def open(cls, uuid: str) -> _Nvml | None:
        try:
            if cls._lib is None:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() != 0:
                    return None
                cls._lib = lib
            handle = ctypes.c_void_p()
            name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            if cls._lib.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(handle)) != 0:
                return None
            return cls(cls._lib, handle)
        except (OSError, AttributeError):
            return None

    @staticmethod
    def now_us() -> int:
        return int(time.time() * 1e6)

    def pids_visible(self) -> bool:
        """Whether NVML's pids are this PID namespace's: this process, which holds a context on
        the GPU while it times, is among the device's compute processes (False where NVML
        cannot say, or a PID namespace gives NVML the host's pids)."""
        count = ctypes.c_uint(256)
        procs = (_Process * count.value)()
        try:
            if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle, ctypes.byref(count), procs) != 0:
                return False
        except (OSError, AttributeError, ctypes.ArgumentError):
            return False
        return bool(self.own & {int(p.pid) for p in procs[: count.value]})

    def others_since(self, since_us: int) -> dict[int, float]:
        """pid -> mean SM utilization of the samples since `since_us`, for every process that
        is not this one. Drivers may report only the processes sampled lately (one entry each),
        so this process's absence from the samples says nothing: when NVML's pids are this
        namespace's (`pids_visible`), every other pid is another process; when a PID namespace
        hides them, all but the busiest one (this)."""
        count = ctypes.c_uint(0)
        try:
            self.lib.nvmlDeviceGetProcessUtilization(self.handle, None, ctypes.byref(count),
                                                     ctypes.c_ulonglong(since_us))
            if count.value == 0:
                return {}
            count = ctypes.c_uint(count.value + 256)  # samples arrive between the two calls
            buf = (_Sample * count.value)()
            if self.lib.nvmlDeviceGetProcessUtilization(self.handle, buf, ctypes.byref(count),
                                                        ctypes.c_ulonglong(since_us)) != 0:
                return {}
        except (OSError, AttributeError, ctypes.ArgumentError):
            return {}
        per: dict[int, list[int]] = {}
        for s in buf[: count.value]:
            if s.timeStamp >= since_us:
                per.setdefault(int(s.pid), []).append(int(s.smUtil))
        means = {p: sum(v) / len(v) for p, v in per.items() if v}
        self.visible = self.visible or bool(self.own & set(means)) or (bool(means) and self.pids_visible())
        if self.visible:
            return {p: u for p, u in means.items() if p not in self.own and u > 0}
        if len(means) <= 1:
            return {}
        mine = max(means, key=lambda p: means[p])
        return {p: u for p, u in means.items() if p != mine and u > 0}


class BusyGuard:
    """Cuts a timing into windows of wall time and judges each one: a busy window's samples
    are void (the caller drops them and times again), after a pause that grows while the
    machine stays busy. Once the busy windows and the pauses have taken `wait_s`, the guard
    is `exhausted`: the caller stops and reports what it has (too little: not measured).

    `cfg` is the timing's `busy` section: `window_ms`, `wait_s` and the `BusyRules` fields;
    `enabled = false` turns the judging off (every window counts)."""

    def __init__(self, device: str, cfg: Any = None, gpu_uuid: str | None = None) -> None:
        raw = dict(cfg or {})
        self.enabled = bool(raw.get("enabled", True))
        self.rules = BusyRules.of(raw)
        self.window_s = float(raw.get("window_ms", 50.0)) / 1e3
        self.wait_s = float(raw.get("wait_s", 30.0))
        self.probe = LoadProbe(device, gpu_uuid) if self.enabled else None
        self.windows = 0
        self.void = 0
        self.waited_s = 0.0
        self.seen: list[str] = []
        self._streak = 0
        self._opened = 0.0
        self._worst = -1.0

    def open(self) -> None:
        self._opened = time.perf_counter()
        if self.probe is not None:
            self.probe.start()

    def due(self) -> bool:
        """Whether the open window has lasted its length."""
        return time.perf_counter() - self._opened >= self.window_s

    def close(self, also: str | None = None) -> str | None:
        """Judge the open window (`also`: a reason the caller saw itself, such as the reference
        far slower than its quiet measurement): what made it busy, or None when it counts."""
        self.windows += 1
        if self.probe is None:
            return None
        w = self.probe.stop()
        why = w.busy(self.rules) or also
        if why is None:
            self._streak = 0
            return None
        self.void += 1
        if w.run_delay_share is None or w.run_delay_share >= self._worst:  # the busiest window's words
            self._worst = w.run_delay_share or 0.0
            self.seen = [why]
        pause = min(1.0, 0.05 * 2 ** self._streak)
        self._streak += 1
        time.sleep(pause)
        self.waited_s += w.wall_s + pause
        return why

    @property
    def exhausted(self) -> bool:
        return self.waited_s >= self.wait_s

    def summary(self, measured: int, wanted: int, least: int) -> dict[str, Any]:
        """The record of the guard's work: windows judged and void, the time spent on busy
        windows and pauses, what was seen, and `busy`, when fewer than `least` of the `wanted`
        units (pairs, calls) were measured in quiet windows: the timing is not a measurement."""
        busy = measured < least
        return {"windows": self.windows, "void_windows": self.void, "waited_s": round(self.waited_s, 3),
                "measured": measured, "wanted": wanted, "seen": list(self.seen), "busy": busy,
                "limit_s": self.wait_s}

    def finish(self) -> None:
        if self.probe is not None:
            self.probe.close()

