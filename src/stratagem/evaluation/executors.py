"""Owns executors: where worker requests run. The local executor manages per-device slots.

A slot is one concurrent worker: on a GPU machine, `workers_per_gpu` slots per GPU, each
pinned with `CUDA_VISIBLE_DEVICES` (so the worker sees `cuda`), each with its own compile
caches kept across candidates; on the CPU, `cpu_slots` slots. Every device (each GPU, and the
CPU) has one shared/exclusive lock file per machine (`worker_api/device_lock.py`): workers
hold it shared while they use the device and exclusive while they time, across every
stratagem process on the machine. On a GPU machine with at least 4 cores, one core per GPU is
reserved for that GPU's timing: workers run off the reserved cores except while they time.
Where `spare_workers` says (GPU slots by default), each slot's next worker is started ahead
while its request runs (`spares.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from stratagem.config import EvaluationConfig, build_cache_setting, cache_dir
from stratagem.errors import ConfigError
from stratagem.evaluation.sandbox import SandboxResult, SandboxSettings, run_worker
from stratagem.evaluation.slots import TIMING_CORES_MIN, Slot, make_slots, reserve_timing_cores
from stratagem.evaluation.spares import Spares, wanted
from stratagem.worker_api.protocol import EvalRequest

__all__ = ["TIMING_CORES_MIN", "Executor", "LocalExecutor", "PinnedExecutor", "Slot", "gpu_slots", "make_executor",
           "reserve_timing_cores", "resolve_device", "visible_gpus"]


class Executor(Protocol):
    """Runs worker requests; `capacity` of them at once. The slot it returns says where the
    request ran (host, physical device); `device` pins a request to one physical device."""

    capacity: int

    async def submit(
        self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, device: str | None = None,
    ) -> tuple[Slot, SandboxResult]: ...

    def devices(self) -> list[str]:
        """The physical devices of its slots, in slot order, each once."""
        ...

    def host(self) -> str | None:
        """The machine every slot is on, when that is known before a request runs (the local
        executor's: this one); None when workers elsewhere take the requests (queue, Ray)."""
        ...

    async def aclose(self) -> None: ...


EXECUTORS = ("local", "queue", "ray")
"""The executor kinds `evaluation.executor` may name."""


def make_executor(cfg: EvaluationConfig, env: Mapping[str, str]) -> Executor:
    """The executor the configuration selects, over the devices `cfg.device` resolves to.

    Raises:
        ConfigError: an unknown executor kind, or a device that is not there.
    """
    kind = cfg.executor
    if kind not in EXECUTORS:
        raise ConfigError(f"evaluation.executor: {kind!r} is not one of {', '.join(EXECUTORS)}")
    if kind == "queue":  # the devices are on the workers' hosts, not here
        from stratagem.evaluation.queue_executor import QueueExecutor

        return QueueExecutor(cfg)
    if kind == "ray":  # the devices are the cluster's
        from stratagem.evaluation.ray_executor import RayExecutor

        return RayExecutor(cfg)
    return LocalExecutor.for_devices(resolve_device(cfg.device, env), cfg, env)


def visible_gpus(env: Mapping[str, str]) -> list[int]:
    """Physical GPU indices this process may use (nvidia-smi, filtered by CUDA_VISIBLE_DEVICES)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    ids = list(range(count))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() != "":
        try:
            ids = [int(x) for x in cvd.split(",") if x.strip() != "" and int(x) in ids]
        except ValueError:
            pass  # UUID form: keep every GPU nvidia-smi lists
    return ids


def resolve_device(device: str, env: Mapping[str, str]) -> list[str]:
    """Physical devices for a `--device` value: `['cpu']` or `['cuda:0', 'cuda:1', ...]`.

    Raises:
        ConfigError: a GPU was asked for but none is visible.
    """
    if device == "cpu":
        return ["cpu"]
    gpus = visible_gpus(env)
    if device == "auto":
        return [f"cuda:{i}" for i in gpus] or ["cpu"]
    if not gpus:
        raise ConfigError(f"--device {device}: no NVIDIA GPU is visible (nvidia-smi found none)")
    if device == "cuda":
        return [f"cuda:{i}" for i in gpus]
    index = int(device.split(":", 1)[1])
    if index not in gpus:
        raise ConfigError(f"--device {device}: visible GPUs are {gpus}")
    return [device]


_CAPABILITY: dict[str, str | None] = {}


def gpu_capability(device: str) -> str | None:
    """`90` for `cuda:N` an H200 is (nvidia-smi's compute capability, read once per device);
    None when nvidia-smi cannot say."""
    if device not in _CAPABILITY:
        exe = shutil.which("nvidia-smi")
        value = None
        if exe is not None and device.startswith("cuda:"):
            try:
                out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader", "-i",
                                      device.split(":", 1)[1]], capture_output=True, text=True, timeout=20)
                digits = out.stdout.strip().replace(".", "")
                value = digits if out.returncode == 0 and digits.isdigit() else None
            except (OSError, subprocess.SubprocessError):
                value = None
        _CAPABILITY[device] = value
    return _CAPABILITY[device]


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class LocalExecutor:
    """Worker slots on this machine."""

    def __init__(self, slots: list[Slot], cfg: EvaluationConfig, base_env: Mapping[str, str]) -> None:
        if not slots:
            raise ConfigError("an executor needs at least one slot")
        self.slots = slots
        self.capacity = len(slots)
        self._cfg = cfg
        self._base_env = dict(base_env)
        self._free: list[Slot] | None = None
        self._ready: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._builds: asyncio.Semaphore | None = None
        """Prebuilds at once (`prebuild`): the cores / 2, as the workers' build slots."""
        self.spares = Spares()
        """The slots' workers started ahead (`[evaluation] spare_workers`)."""
        self._alone: dict[str, int] = {}
        """Requests running alone on each physical device (no spare there meanwhile)."""

    @classmethod
    def for_devices(cls, devices: list[str], cfg: EvaluationConfig, base_env: Mapping[str, str]) -> LocalExecutor:
        per = {d: (cfg.cpu_slots if d == "cpu" else cfg.workers_per_gpu) for d in devices}
        return cls(make_slots(devices, cache_dir(cfg), per, platform.node() or "host", build_cache_setting(cfg)),
                   cfg, base_env)

    def devices(self) -> list[str]:
        return list(dict.fromkeys(s.physical for s in self.slots))

    def host(self) -> str | None:
        hosts = {s.host for s in self.slots}
        return hosts.pop() if len(hosts) == 1 else None

    def _pool(self) -> tuple[list[Slot], asyncio.Condition]:
        loop = asyncio.get_running_loop()
        if self._free is None or self._ready is None or self._loop is not loop:
            self._loop = loop
            self._free = list(self.slots)
            self._ready = asyncio.Condition()
        return self._free, self._ready

    async def _take(self, device: str | None) -> Slot:
        """A free slot (on `device` when given): the most recently used one first, whose
        compile caches are the warmest."""
        if device is not None and all(s.physical != device for s in self.slots):
            raise ConfigError(f"no slot of this executor is on {device} (its devices: {', '.join(self.devices())})")
        free, ready = self._pool()
        async with ready:
            while True:
                for i in range(len(free) - 1, -1, -1):
                    if device is None or free[i].physical == device:
                        return free.pop(i)
                await ready.wait()

    async def _give(self, slot: Slot) -> None:
        free, ready = self._pool()
        async with ready:
            free.append(slot)
            ready.notify_all()

    async def submit(
        self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, device: str | None = None,
    ) -> tuple[Slot, SandboxResult]:
        """Run `request` in a free slot (on the physical `device` when given):
        `compile_timeout_s` for its `load` stage, if it has one, then `timeout_s` for the rest;
        `on_event` sees the worker's progress events."""
        slot = await self._take(device)
        alone = bool(request.alone)
        if alone:
            self._alone[slot.physical] = self._alone.get(slot.physical, 0) + 1
        try:
            if alone:  # nothing of this executor's beside it: the device's spares go first
                await self._close_spares(lambda i: self.slots[i].physical == slot.physical)
            req = request.model_copy(update=slot.prepare())
            settings = SandboxSettings(
                timeout_s=timeout_s,
                base_env=self._base_env,
                slot_env=slot.env,
                cache_dir=slot.caches,
                network=self._cfg.network,
                memory_limit_bytes=(
                    int(self._cfg.memory_limit_gb * 2**30)
                    if self._cfg.memory_limit_gb and slot.device == "cpu" else None
                ),
                max_response_bytes=self._cfg.max_response_bytes,
                compile_stage=req.compile_stage if compile_timeout_s else None,
                compile_timeout_s=compile_timeout_s,
                lock_wait_timeout_s=self._cfg.lock_wait_timeout_s,
                on_event=on_event,
            )
            req_json = req.model_dump_json()
            ahead = None
            if wanted(self._cfg.spare_workers, slot.physical) and not self._alone.get(slot.physical):
                ahead = self.spares.take(slot.index, req_json, settings)
                # the slot's next worker starts now, while this one runs
                self.spares.start(slot.index, req_json, settings, slot.device,
                                  str(slot.lock_path) if slot.lock_path else None, slot.reserved_cores)
            result = await (run_worker(req_json, settings, ahead) if ahead is not None
                            else run_worker(req_json, settings))
            return slot, result
        finally:
            if alone:
                self._alone[slot.physical] -= 1
            await self._give(slot)

    async def _close_spares(self, which: Callable[[int], bool]) -> None:
        killed = self.spares.kill(which)
        with contextlib.suppress(TimeoutError):  # their memory is free once they have ended
            async with asyncio.timeout(10):
                await asyncio.gather(*(a.proc.wait() for a in killed), return_exceptions=True)

    async def prebuild(self, request: EvalRequest, timeout_s: float, device: str | None = None) -> SandboxResult | None:
        """Run `request` (a domain's `prebuild_request`) in a CPU build worker for the GPU
        `device` (default: this executor's first), outside every slot and device lock, at most
        cores/2 at once, so the GPU's slots time other designs while it compiles; the builds
        land in the shared build cache that the design's own evaluation then loads from. None
        (nothing run) when this executor has no GPU, the GPU's architecture cannot be read, or
        `[evaluation] prebuild` says not now (`when_busy`, the default, with a slot of the GPU
        free: the design takes it and builds there outside the device lock, one worker start
        sooner; the measured latency on the H200 is in benchmarks/RESULTS.md).
        The worker sees no GPU and builds for that architecture (`STRATAGEM_BUILD_ARCH`), off
        the cores reserved for timing, in a folder of its own removed afterwards."""
        gpus = [s for s in self.slots if s.physical.startswith("cuda") and device in (None, s.physical)]
        if not gpus or self._cfg.prebuild == "never" or (self._cfg.prebuild == "when_busy"
                                                          and self.free_slot_on(gpus[0].physical)):
            return None
        arch = gpu_capability(gpus[0].physical)
        if arch is None:
            return None
        return await self._run_prebuild(request, timeout_s, gpus[0], arch)

    def free_slot_on(self, device: str) -> bool:
        """Whether a slot on the physical `device` is free now (the design would take it at once)."""
        free, _ready = self._pool()
        return any(s.physical == device for s in free)

    async def _run_prebuild(self, request: EvalRequest, timeout_s: float, slot: Slot, arch: str) -> SandboxResult:
        """`prebuild`'s worker for `slot`'s device, building for `arch`."""
        if self._builds is None:
            self._builds = asyncio.Semaphore(max(1, (os.cpu_count() or 2) // 2))
        async with self._builds:
            folder = Path(tempfile.mkdtemp(prefix="prebuild-", dir=_ensure(cache_dir(self._cfg) / "slots")))
            try:
                env = {**slot.env, "CUDA_VISIBLE_DEVICES": "", "STRATAGEM_BUILD_ARCH": arch, "STRATAGEM_BUILD_PCH": "1"}
                req = request.model_copy(update={"device": "cpu", "timing_lock": None, "timing_cores": [],
                                                 "reserved_cores": list(slot.reserved_cores)})
                settings = SandboxSettings(
                    timeout_s=timeout_s, base_env=self._base_env, slot_env=env, cache_dir=folder,
                    network=self._cfg.network,
                    memory_limit_bytes=int(self._cfg.memory_limit_gb * 2**30) if self._cfg.memory_limit_gb else None,
                    max_response_bytes=self._cfg.max_response_bytes)
                return await run_worker(req.model_dump_json(), settings)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    async def aclose(self) -> None:
        """Kill the spare workers (none is left running) and forget the slots' pool."""
        await self.spares.close()
        self._free, self._ready = None, None


def gpu_slots(executor: Executor) -> int:
    """How many GPU evaluations `executor` runs at once: its slots on GPUs (a local executor:
    `workers_per_gpu` per GPU), its whole capacity when its workers are elsewhere and serve
    GPUs (queue, Ray), 0 on the CPU."""
    devices = executor.devices()
    if not any(d.startswith("cuda") for d in devices):
        return 0
    slots: list[Slot] | None = getattr(executor, "slots", None)
    if slots is None:
        return executor.capacity
    return sum(1 for s in slots if s.physical.startswith("cuda"))


class PinnedExecutor:
    """One physical device of a shared executor: every request it is given goes to `device`
    (unless the caller names another), so the evaluations, baselines and peaks of whatever uses
    it all land on that device, through the shared executor's slots, locks and caches. A
    suite gives each problem's run the device with the fewest runs on it (`search/suite.py`).
    Closing it closes nothing: the shared executor belongs to its owner."""

    def __init__(self, inner: Executor, device: str) -> None:
        if device not in inner.devices():
            raise ConfigError(f"no slot of this executor is on {device} (its devices: {', '.join(inner.devices())})")
        self.inner = inner
        self.device = device
        slots: list[Slot] | None = getattr(inner, "slots", None)
        self.capacity = sum(1 for s in slots if s.physical == device) if slots is not None else 1

    async def submit(
        self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, device: str | None = None,
    ) -> tuple[Slot, SandboxResult]:
        return await self.inner.submit(request, timeout_s, compile_timeout_s, on_event, device or self.device)

    async def prebuild(self, request: EvalRequest, timeout_s: float, device: str | None = None) -> SandboxResult | None:
        """The shared executor's prebuild, for this executor's device (None: it has none)."""
        inner = getattr(self.inner, "prebuild", None)
        return None if inner is None else await inner(request, timeout_s, device or self.device)

    def devices(self) -> list[str]:
        return [self.device]

    def host(self) -> str | None:
        return self.inner.host()

    async def aclose(self) -> None:
        return None
