"""Owns the Ray executor: worker requests run on a Ray cluster, in the same sandboxed worker
process as the local executor's, started by a runner actor on the node.

Each runner is a Ray actor holding a `LocalExecutor` over its share of one node: on GPU
clusters one runner per GPU (`num_gpus=1`, so Ray pins it with `CUDA_VISIBLE_DEVICES`), each
with `workers_per_gpu` slots; on the CPU one runner per node, or `ray_actors` of them, each
with `cpu_slots` slots. Inside a runner everything is the local executor's: the fresh process
group, the scrubbed environment, the limits, the per-device lock and the compile caches of
the node, so a result is the same in content as a local one, its slot naming the node's host
and physical device. The driver keeps the count of free slots per runner and sends each
request to the runner with the most; a runner that dies mid-request (its node lost, its
process killed: the worker dies with it, by PDEATHSIG) is replaced and the request redone
once, on any runner; a second loss is the request's failure, as data. A design that builds an
extension is first built on a CPU build worker of a runner's node (`prebuild`, as the local
executor does), outside the GPU's slots. Ray is an optional
dependency (`pip install 'stratagem[ray]'`), imported only when this executor is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stratagem.config import EvaluationConfig, environment
from stratagem.errors import ConfigError, import_extra
from stratagem.evaluation.sandbox import SandboxResult
from stratagem.evaluation.slots import Slot
from stratagem.worker_api.protocol import EvalRequest

NAMESPACE = "stratagem"
RETRIES = 1
"""A request whose runner died is redone this many times elsewhere."""


def import_ray() -> Any:
    """The `ray` module.

    Raises:
        MissingExtra: Ray is not installed (a ConfigError naming the pip command).
    """
    return import_extra("ray", "ray", "--executor ray (evaluation.executor = \"ray\")")


class NodeRunner:
    """The actor's body (made a Ray actor by `_actor_class`): a local executor on its node."""

    def __init__(self, cfg_json: str, device: str, driver_host: str | None = None) -> None:
        from stratagem.evaluation.executors import LocalExecutor, resolve_device

        cfg = EvaluationConfig.model_validate_json(cfg_json)
        if driver_host is not None and driver_host != (platform.node() or "host"):
            # the driver's cache folder is the driver's: a node elsewhere keeps its compile
            # caches and locks under its own (STRATAGEM_CACHE_DIR, else ~/.cache/stratagem)
            cfg = cfg.model_copy(update={"cache_dir": None})
        env = environment()  # the node's own: Ray set CUDA_VISIBLE_DEVICES for a GPU runner
        self.executor = LocalExecutor.for_devices(resolve_device(device, env), cfg, env)

    def info(self) -> dict[str, Any]:
        return {"host": platform.node() or "host", "pid": os.getpid(), "devices": self.executor.devices(),
                "capacity": self.executor.capacity}

    async def submit(self, request_json: str, timeout_s: float, compile_timeout_s: float | None,
                     device: str | None) -> tuple[Slot, SandboxResult, list[dict[str, Any]]]:
        events: list[dict[str, Any]] = []
        slot, result = await self.executor.submit(EvalRequest.model_validate_json(request_json), timeout_s,
                                                  compile_timeout_s, events.append, device)
        return slot, result, events

    async def prebuild(self, request_json: str, timeout_s: float, device: str | None) -> SandboxResult | None:
        """The node's CPU build worker for `device` (`LocalExecutor.prebuild`): the build lands
        in this node's build cache; None when the node has no GPU to build for."""
        return await self.executor.prebuild(EvalRequest.model_validate_json(request_json), timeout_s, device)


def _actor_class(ray: Any) -> Any:
    return ray.remote(NodeRunner)


@dataclass
class _Runner:
    handle: Any
    options: dict[str, Any]
    host: str
    devices: list[str]
    capacity: int
    busy: int = 0
    lost: int = 0
    pid: int = 0
    history: list[str] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class RayExecutor:
    """Worker slots on a Ray cluster (see the module's docstring)."""

    def __init__(self, cfg: EvaluationConfig) -> None:
        self._ray = ray = import_ray()
        self._cfg = cfg
        if not ray.is_initialized():
            ray.init(address=cfg.ray_address, namespace=NAMESPACE, include_dashboard=False,
                     log_to_driver=False, configure_logging=False, ignore_reinit_error=True)
        self._cls = _actor_class(ray)
        self._runners = [self._start(opts) for opts in self._plan()]
        if not self._runners:
            raise ConfigError(f"--executor ray: the cluster has no {'GPU' if self._gpu else 'node'} to run on")
        self.capacity = sum(r.capacity for r in self._runners)
        self._ready: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the runners --------------------------------------------------------------------------

    def _plan(self) -> list[dict[str, Any]]:
        """Each runner's actor options: one per GPU of the cluster (a GPU device), else per
        node or `ray_actors` of them (the CPU)."""
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        gpus = int(sum(float(n.get("Resources", {}).get("GPU", 0)) for n in nodes))
        device = self._cfg.device
        self._gpu = device != "cpu" and gpus > 0
        if device not in ("cpu", "auto") and gpus == 0:
            raise ConfigError(f"--device {device} with --executor ray: the Ray cluster has no GPU")
        if self._gpu:
            count = min(gpus, self._cfg.ray_actors or gpus)
            return [{"num_gpus": 1, "num_cpus": 1, "device": "cuda"} for _ in range(count)]
        count = self._cfg.ray_actors or len(nodes)
        return [{"num_cpus": 0.01, "device": "cpu", "spread": True} for _ in range(count)]

    def _start(self, opts: dict[str, Any]) -> _Runner:
        ray = self._ray
        extra: dict[str, Any] = {"max_concurrency": 1000}
        if opts.get("spread"):
            extra["scheduling_strategy"] = "SPREAD"
        handle = self._cls.options(num_cpus=opts["num_cpus"], num_gpus=opts.get("num_gpus", 0), **extra).remote(
            self._cfg.model_dump_json(), opts["device"], platform.node() or "host")
        info = ray.get(handle.info.remote())
        return _Runner(handle, opts, str(info["host"]), list(info["devices"]), int(info["capacity"]),
                       pid=int(info["pid"]))

    def devices(self) -> list[str]:
        return list(dict.fromkeys(d for r in self._runners for d in r.devices))

    def host(self) -> str | None:
        """Unknown before a runner answers: a request goes to the runner with the most free
        slots, and a lost runner is replaced wherever Ray places it."""
        return None

    def runners(self) -> list[dict[str, Any]]:
        """Where the runners are: host, process, devices, capacity, busy slots, losses."""
        return [{"host": r.host, "pid": r.pid, "devices": r.devices, "capacity": r.capacity, "busy": r.busy,
                 "lost": r.lost} for r in self._runners]

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._ready is None or self._loop is not loop:
            self._loop, self._ready = loop, asyncio.Condition()
        return self._ready

    async def _take(self, device: str | None, avoid: _Runner | None) -> _Runner:
        if device is not None and not any(device in r.devices for r in self._runners):
            raise ConfigError(f"no Ray runner is on {device} (their devices: {', '.join(self.devices())})")
        ready = self._condition()
        async with ready:
            while True:
                fits = [r for r in self._runners if r.busy < r.capacity and (device is None or device in r.devices)]
                others = [r for r in fits if r is not avoid] or fits
                if others:
                    runner = max(others, key=lambda r: r.capacity - r.busy)
                    runner.busy += 1
                    return runner
                await ready.wait()

    async def _give(self, runner: _Runner) -> None:
        ready = self._condition()
        async with ready:
            runner.busy -= 1
            ready.notify_all()

    async def _replace(self, runner: _Runner, dead: Any, why: str) -> None:
        """A dead runner's actor replaced by a fresh one with its options (the same kind of
        slot, wherever Ray can place it), once however many of its requests saw it die."""
        async with runner.lock:
            if runner.handle is not dead:  # another request replaced it already
                return
            runner.lost += 1
            runner.history.append(why)
            fresh = await asyncio.to_thread(self._start, runner.options)
            runner.handle, runner.host, runner.devices, runner.pid = fresh.handle, fresh.host, fresh.devices, fresh.pid

    # -- requests -----------------------------------------------------------------------------

    async def submit(
        self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, device: str | None = None,
    ) -> tuple[Slot, SandboxResult]:
        """Run `request` on a runner with a free slot; redo it once elsewhere if its runner
        dies. The worker's progress events reach `on_event` when the request ends (Ray
        returns them with the result)."""
        errors = self._ray.exceptions
        lost = (errors.RayActorError, errors.ActorDiedError, errors.ActorUnavailableError)
        avoid: _Runner | None = None
        t0 = time.monotonic()
        why = ""
        for _attempt in range(1 + RETRIES):
            runner = await self._take(device, avoid)
            handle = runner.handle
            try:
                slot, result, events = await handle.submit.remote(
                    request.model_dump_json(), timeout_s, compile_timeout_s, device)
            except lost as e:
                why = f"the Ray runner on {runner.host} (pid {runner.pid}) was lost mid-request: {type(e).__name__}"
                await self._replace(runner, handle, why)
                avoid = runner
                continue
            finally:
                await self._give(runner)
            if on_event is not None:
                for ev in events:
                    on_event(ev)
            return slot, result
        return self._lost_slot(avoid, device), _lost_result(why, time.monotonic() - t0)

    async def prebuild(self, request: EvalRequest, timeout_s: float, device: str | None = None) -> SandboxResult | None:
        """Build `request` (a domain's `prebuild_request`) on a CPU build worker of a runner's
        node (on `device`'s runner when given, else the least busy runner), outside its slots, so
        its GPU times other designs meanwhile; the node's evaluations then load the build from
        its build cache. A runner on another node than the evaluation's builds in vain and the
        design's own worker builds; a runner lost mid-build is replaced later by `submit` and
        costs only the attempt (None: nothing built)."""
        fits = [r for r in self._runners if device is None or device in r.devices]
        if not fits:
            return None
        runner = min(fits, key=lambda r: r.busy / max(1, r.capacity))
        errors = self._ray.exceptions
        try:
            return await runner.handle.prebuild.remote(request.model_dump_json(), timeout_s, device)
        except (errors.RayActorError, errors.ActorDiedError, errors.ActorUnavailableError):
            return None

    def _lost_slot(self, runner: _Runner | None, device: str | None) -> Slot:
        r = runner or self._runners[0]
        physical = device or (r.devices[0] if r.devices else "cpu")
        return Slot(index=-1, device="cpu" if physical == "cpu" else "cuda", physical=physical, env={},
                    lock_path=None, host=r.host)

    async def aclose(self) -> None:
        for r in self._runners:
            with contextlib.suppress(Exception):  # already gone
                self._ray.kill(r.handle)
        self._runners = []
        self._ready = None


def _lost_result(why: str, duration_s: float) -> SandboxResult:
    """A request whose runner died at every attempt, as a worker result that says so."""
    return SandboxResult(response_text=None, response_problem=f"{why} (redone {RETRIES} time(s); lost again)",
                         progress=[], returncode=None, signal_name=None, timed_out=False, duration_s=duration_s,
                         stdout_tail="", stderr_tail=why, network_isolated=False, strays_killed=0,
                         lost=f"{why}; redone on another runner and lost again: not the design's doing")
