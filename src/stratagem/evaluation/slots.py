"""Owns executor slots: one concurrent worker position each, with its device, pinned
environment (visible devices, the shared build cache), compile-cache folder (per host and
device: the request's domain names the caches in it), device lock and timing cores. Standard library
only, so a queue worker (`evaluation/queue_worker.py`) builds its slot the way the local
executor does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Slot:
    """One concurrent worker position."""

    index: int
    device: str
    """The device as the worker sees it: `cpu` or `cuda`."""
    physical: str
    """The device on this machine: `cpu` or `cuda:N`."""
    env: Mapping[str, str]
    """Variables pinned for this slot (visible devices, the shared build cache)."""
    lock_path: Path | None
    """The physical device's shared/exclusive lock."""
    timing_cores: tuple[int, ...] = ()
    """Cores this slot's worker times on (GPU slots on machines with cores to spare)."""
    reserved_cores: tuple[int, ...] = ()
    """Every GPU's timing cores on this machine (workers keep off them otherwise)."""
    host: str = ""
    """The machine this slot is on (`platform.node()` for local slots)."""
    caches: Path | None = None
    """The slot's folder of compile caches (`SandboxSettings.cache_dir`)."""

    @property
    def where(self) -> str:
        """`host/device`: where an evaluation in this slot ran (stored with it)."""
        return f"{self.host or '?'}/{self.physical}"

    def prepare(self) -> dict[str, Any]:
        """Make the slot's folders (the paths its variables pin, its lock's folder) and return
        what a request run in it is given: its device, timing lock and cores."""
        for v in self.env.values():
            if v and v.startswith("/"):
                Path(v).mkdir(parents=True, exist_ok=True)
        if self.lock_path is not None:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        return {"device": self.device, "timing_lock": str(self.lock_path) if self.lock_path else None,
                "timing_cores": list(self.timing_cores), "reserved_cores": list(self.reserved_cores)}


TIMING_CORES_MIN = 4
"""Machines with fewer usable cores reserve none (there is no core to spare)."""


def reserve_timing_cores(devices: list[str]) -> dict[str, tuple[int, ...]]:
    """One core per GPU for its timing thread: the last usable core for the first GPU, the one
    before it for the second, ... (the same on every process of this machine, so separate runs
    agree). None on the CPU device, or where fewer than 4 cores (per GPU, plus 2) are usable."""
    gpus = [d for d in devices if d.startswith("cuda")]
    if not gpus or not hasattr(os, "sched_getaffinity"):
        return {}
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < max(TIMING_CORES_MIN, len(gpus) + 2):
        return {}
    return {dev: (cores[-1 - int(dev.split(":", 1)[1]) % len(cores)],) for dev in gpus}


def make_slots(devices: list[str], root: Path, per_device: Mapping[str, int], host: str,
               build_cache: str | None = None) -> list[Slot]:
    """`per_device[d]` slots on each physical device `d` (`cpu`, `cuda:N`), their caches and
    locks under `root` (the cache directory), on machine `host`: the compile caches are per host
    and device, so workers of several machines sharing one cache folder never share one."""
    timing_cores = reserve_timing_cores(devices)
    reserved = tuple(sorted(c for cs in timing_cores.values() for c in cs))
    slots: list[Slot] = []
    for dev in devices:
        for j in range(per_device.get(dev, 1)):
            tag = dev.replace(":", "") + f"-w{j}"
            caches = root / "slots" / f"{host}-{tag}"
            # shared by every slot and run: entries are keyed and verified (build_cache.py)
            env = {"STRATAGEM_BUILD_CACHE": build_cache or str(root / "builds")}
            lock = root / "locks" / f"{host}-{dev.replace(':', '')}.lock"
            if dev == "cpu":
                env["CUDA_VISIBLE_DEVICES"] = ""
                worker_dev = "cpu"
            else:
                env["CUDA_VISIBLE_DEVICES"] = dev.split(":", 1)[1]
                worker_dev = "cuda"
            slots.append(Slot(len(slots), worker_dev, dev, env, lock,
                              timing_cores.get(dev, ()), reserved if dev != "cpu" else (), host, caches))
    return slots
