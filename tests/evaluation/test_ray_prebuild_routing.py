"""Where the Ray executor sends a CPU build (issue 29, item 1: compiles on CPUs, outside the
GPU's slots): to the runner on the asked device, else the least busy one; a runner lost
mid-build costs only the attempt. The runners' handles are stood in for (no Ray needed)."""

from __future__ import annotations

import asyncio
from typing import Any

from stratagem.evaluation.ray_executor import RayExecutor, _Runner
from stratagem.worker_api.protocol import EvalRequest


class Lost(Exception):
    pass


class _Errors:
    RayActorError = Lost
    ActorDiedError = Lost
    ActorUnavailableError = Lost


class _Ray:
    exceptions = _Errors


class _Method:
    def __init__(self, name: str, calls: list[tuple[str, Any]], dies: bool) -> None:
        self.name, self.calls, self.dies = name, calls, dies

    def remote(self, request_json: str, timeout_s: float, device: str | None) -> Any:
        self.calls.append((self.name, device))

        async def answer() -> str:
            if self.dies:
                raise Lost("the actor died")
            return f"built by {self.name}"
        return answer()


class _Handle:
    def __init__(self, name: str, calls: list[tuple[str, Any]], dies: bool = False) -> None:
        self.prebuild = _Method(name, calls, dies)


def _executor(runners: list[_Runner]) -> RayExecutor:
    ex = RayExecutor.__new__(RayExecutor)
    ex._ray, ex._runners = _Ray(), runners
    return ex


def _request() -> EvalRequest:
    return EvalRequest.model_validate({"request_id": "r1", "domain": "pytorch", "worker_module": "w", "stages": [],
                                       "problem": {"name": "p.py", "source": ""}, "device": "cpu"})


def test_the_build_goes_to_the_asked_devices_runner_else_the_least_busy() -> None:
    calls: list[tuple[str, Any]] = []
    a = _Runner(_Handle("a", calls), {}, "node-a", ["cuda:0"], capacity=2, busy=2)
    b = _Runner(_Handle("b", calls), {}, "node-b", ["cuda:1"], capacity=2, busy=0)
    ex = _executor([a, b])
    assert asyncio.run(ex.prebuild(_request(), 10.0, "cuda:0")) == "built by a"
    assert asyncio.run(ex.prebuild(_request(), 10.0)) == "built by b"
    assert asyncio.run(ex.prebuild(_request(), 10.0, "cuda:7")) is None  # no runner there: nothing run
    assert calls == [("a", "cuda:0"), ("b", None)]


def test_a_runner_lost_mid_build_costs_only_the_attempt() -> None:
    calls: list[tuple[str, Any]] = []
    ex = _executor([_Runner(_Handle("a", calls, dies=True), {}, "node-a", ["cuda:0"], capacity=1)])
    assert asyncio.run(ex.prebuild(_request(), 10.0)) is None
    assert calls == [("a", None)]
