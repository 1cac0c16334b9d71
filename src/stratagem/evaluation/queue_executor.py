"""Owns the queue executor (`evaluation.executor = "queue"`, `--executor queue --queue DIR`):
every evaluation request, baselines and calibration included, is written into the queue
folder (evaluation/queue.py) with the sandbox settings to apply, and its response is awaited
there; `stratagem worker --queue DIR` processes on the GPU hosts do the evaluating. Timeouts,
the timing lock and the device identity work on the worker's side as they do locally; the
slot a response names (host, physical device) is where the evaluation ran.

A run's requests carry its owner (the run directory) and a key (a hash of what they ask), so
a resumed run that asks again for what its killed self had asked for waits for that request
or takes its unread response, instead of queueing it twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig
from stratagem.errors import ConfigError, HarnessError
from stratagem.evaluation.queue import QueueDir, new_id
from stratagem.evaluation.sandbox import JudgeRun, SandboxResult
from stratagem.evaluation.slots import Slot
from stratagem.worker_api.protocol import EvalRequest


def request_key(request: EvalRequest, device: str | None) -> str:
    """What a request asks, whatever its random parts: the domain, the problem, the design's
    files, the stages, the device it is pinned to, and a confirmation block's programs in
    their order (the blocks of one round differ only there)."""
    body = {"domain": request.domain, "problem": request.problem.model_dump(mode="json"), "files": request.files,
            "stages": [s.model_dump(mode="json") for s in request.stages], "device": device,
            "kind": "judge" if request.judge else "plain"}
    if request.payload.get("confirm_order"):
        body["confirm_order"] = list(request.payload["confirm_order"])
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def result_of(body: dict[str, Any]) -> SandboxResult:
    """The SandboxResult a worker sent (a worker failure becomes a harness error)."""
    if "error" in body or not isinstance(body.get("result"), dict):
        raise HarnessError(f"the queue worker {body.get('worker', '?')} could not evaluate the request: "
                           f"{body.get('error', 'no result in its response')}")
    r = dict(body["result"])
    judge = r.pop("judge", None)
    return SandboxResult(**r, judge=JudgeRun(**judge) if isinstance(judge, dict) else None)


def slot_of(body: dict[str, Any]) -> Slot:
    s = body.get("slot") or {}
    return Slot(int(s.get("index", 0)), str(s.get("device", "")), str(s.get("physical", "?")),
                dict(s.get("env") or {}), Path(s["lock_path"]) if s.get("lock_path") else None,
                tuple(s.get("timing_cores") or ()), tuple(s.get("reserved_cores") or ()), str(s.get("host", "")))


class QueueExecutor:
    """Evaluations through a queue folder served by `stratagem worker` processes."""

    def __init__(self, cfg: EvaluationConfig, owner: str | None = None) -> None:
        if cfg.queue_dir is None:
            raise ConfigError("evaluation.executor = queue needs evaluation.queue_dir (--queue DIR)")
        self.cfg = cfg
        self.queue = QueueDir(cfg.queue_dir, lease_s=cfg.queue_lease_s)
        self.capacity = cfg.queue_capacity
        self.owner = owner or f"process-{os.getpid()}"
        """Whose requests these are: the run directory, once the run sets it (`own`)."""
        self._sem: asyncio.Semaphore | None = None
        self._device = "cpu" if cfg.device == "cpu" else "cuda"

    def own(self, owner: str) -> None:
        self.owner = owner

    def devices(self) -> list[str]:
        """The device kind the workers serve (`cpu` or `cuda`): the hosts are elsewhere."""
        return [self._device]

    def host(self) -> str | None:
        """Unknown before a worker answers: whichever worker claims a request runs it."""
        return None

    async def submit(
        self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, device: str | None = None,
    ) -> tuple[Slot, SandboxResult]:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.capacity)
        async with self._sem:
            pin = device or self._device
            key = request_key(request, pin)
            rid = self.queue.find(self.owner, key)
            if rid is None:
                rid = new_id()
                self.queue.put({"id": rid, "owner": self.owner, "key": key, "device": pin,
                                "request": request.model_dump(mode="json"), "settings": self._settings(
                                    request, timeout_s, compile_timeout_s)})
            body = await self._await(rid, on_event)
        return slot_of(body), result_of(body)

    def _settings(self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None) -> dict[str, Any]:
        c = self.cfg
        return {"timeout_s": timeout_s, "network": c.network,
                "memory_limit_bytes": int(c.memory_limit_gb * 2**30) if c.memory_limit_gb and self._device == "cpu"
                else None, "max_response_bytes": c.max_response_bytes,
                "compile_stage": request.compile_stage if compile_timeout_s else None,
                "compile_timeout_s": compile_timeout_s, "lock_wait_timeout_s": c.lock_wait_timeout_s}

    async def _await(self, rid: str, on_event: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        waited = 0.0
        seen = 0
        progress = self.queue.path("progress", rid, ".jsonl")
        while True:
            body = self.queue.take(rid)
            if body is not None:
                return body
            if on_event is not None and progress.exists():
                lines = progress.read_text(encoding="utf-8").splitlines()
                for line in lines[seen:]:
                    try:
                        on_event(json.loads(line))
                    except ValueError:
                        pass
                seen = len(lines)
            self.queue.requeue_expired()
            if self.cfg.queue_wait_s is not None and waited > self.cfg.queue_wait_s:
                raise HarnessError(f"no queue worker answered request {rid[:12]} within "
                                   f"evaluation.queue_wait_s = {self.cfg.queue_wait_s:g} s (start `stratagem "
                                   f"worker --queue {self.queue.root}` on the GPU host)")
            await asyncio.sleep(self.cfg.queue_poll_s)
            waited += self.cfg.queue_poll_s

    async def aclose(self) -> None:
        self._sem = None
