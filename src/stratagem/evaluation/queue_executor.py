"""Owns the queue executor (`evaluation.executor = "queue"`, `--executor queue --queue DIR`):
every evaluation request, baselines and calibration included, is written into the queue
folder (evaluation/queue.py) with the sandbox settings to apply, and its response is awaited
there; `stratagem worker --queue DIR` processes on the GPU hosts do the evaluating. Timeouts,
the timing lock and the device identity work on the worker's side as they do locally; the
slot a response names (host, physical device) is where the evaluation ran.

A run's requests carry its owner (the run directory) and a key (a hash of what they ask), so
a resumed run that asks again for what its killed self had asked for waits for that request
or takes its unread response, instead of queueing it twice.

While a request waits unclaimed, its stage says so (`QueueWait.text`): since when, how many of
the run's requests wait or are claimed, when a worker last touched the queue. A wait with no
sign of a worker for longer than `evaluation.queue_wait_s` (`--queue-wait`) raises
`QueueStalled`: the run stops cleanly and `stratagem resume` continues it, taking whatever
answers arrived meanwhile (docs/queue.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig
from stratagem.errors import ConfigError, HarnessError, QueueStalled
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


def result_of(body: dict[str, Any], earlier: dict[str, Any] | None = None) -> SandboxResult:
    """The SandboxResult a worker sent (a worker failure becomes a harness error); `earlier`:
    the request it answers, where that is an earlier request found in the queue rather than
    the one given (the response's own copy of it first)."""
    if "error" in body or not isinstance(body.get("result"), dict):
        raise HarnessError(f"the queue worker {body.get('worker', '?')} could not evaluate the request: "
                           f"{body.get('error', 'no result in its response')}")
    r = {k: v for k, v in body["result"].items() if k != "answered"}
    judge = r.pop("judge", None)
    answered = None
    if earlier is not None:  # a response older than its own copy of the request: the queued one's
        answered = body["request"] if isinstance(body.get("request"), dict) else (earlier or None)
    return SandboxResult(**r, judge=JudgeRun(**judge) if isinstance(judge, dict) else None, answered=answered)


def slot_of(body: dict[str, Any]) -> Slot:
    s = body.get("slot") or {}
    return Slot(int(s.get("index", 0)), str(s.get("device", "")), str(s.get("physical", "?")),
                dict(s.get("env") or {}), Path(s["lock_path"]) if s.get("lock_path") else None,
                tuple(s.get("timing_cores") or ()), tuple(s.get("reserved_cores") or ()), str(s.get("host", "")))


def _at(t: float, now: float) -> str:
    """A moment as the wait's line says it: its clock time and how long ago, in whole minutes
    (so the line changes once a minute, not at every look)."""
    ago = max(0.0, now - t)
    return f"{time.strftime('%H:%M:%S', time.localtime(t))}, " + (
        "under a minute ago" if ago < 60 else f"{ago / 60:.0f} min ago")


@dataclass(frozen=True)
class QueueWait:
    """What a run waiting on one request knows of its queue: the live view's line and the
    stop's message."""

    queue: str
    """The queue folder."""
    queued_at: float
    """When this request was queued (or found queued by a resumed run)."""
    waiting: int
    """This run's requests in the queue not yet claimed (this one included)."""
    claimed: int
    """This run's requests a worker is evaluating."""
    worker_seen_at: float | None
    """When a worker last touched the queue (`QueueDir.worker_seen_at`), or this run last
    took an answer, whichever is later."""
    idle_since: float
    """Since when no worker was seen: the later of the wait's start and `worker_seen_at`."""
    bound_s: float | None
    """`evaluation.queue_wait_s`."""
    taken: bool = False
    """A worker claimed this request (its stages follow once it starts)."""

    def text(self, now: float) -> str:
        seen = (f"a worker last touched the queue at {_at(self.worker_seen_at, now)}"
                if self.worker_seen_at is not None else "no worker has touched the queue yet")
        bound = (f"the run stops after {self.bound_s:g} s without one (evaluation.queue_wait_s)"
                 if self.bound_s is not None else "no bound on this wait (evaluation.queue_wait_s)")
        head = "claimed by a queue worker" if self.taken else "waiting for a queue worker"
        return (f"{head}: queued at {_at(self.queued_at, now)}; this run's requests: "
                f"{self.waiting} waiting, {self.claimed} claimed; {seen}; {bound}")

    def stalled(self, now: float) -> QueueStalled:
        assert self.bound_s is not None
        return QueueStalled(
            f"no queue worker touched {self.queue} for {now - self.idle_since:.0f} s (evaluation.queue_wait_s = "
            f"{self.bound_s:g} s): {self.waiting} of this run's requests wait there, the oldest queued at "
            f"{time.strftime('%H:%M:%S', time.localtime(self.queued_at))}. Serve the queue (`stratagem worker "
            f"--queue {self.queue} --once` where the GPUs are, or a ferry call: docs/usage.md); the run stopped "
            "cleanly and resuming it takes the answers that arrived meanwhile")


def queue_line(queue: QueueDir, now: float, bound_s: float | None = None) -> str | None:
    """Where a queue stands, for a view of many runs sharing it (a suite): its requests waiting
    (since when) and claimed, when a worker last touched it; None when nothing waits there."""
    waiting, claimed = queue.count("requests"), queue.count("claimed")
    if not waiting and not claimed:
        return None
    oldest = queue.oldest("requests")
    seen = queue.worker_seen_at()
    return (f"queue {queue.root}: {waiting} requests waiting"
            + (f" (the oldest queued at {_at(oldest, now)})" if oldest is not None else "") + f", {claimed} claimed; "
            + (f"a worker last touched it at {_at(seen, now)}" if seen is not None else "no worker has touched it yet")
            + (f"; runs stop after {bound_s:g} s without one (evaluation.queue_wait_s)" if bound_s is not None else ""))


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
        self._mine: dict[str, float] = {}
        """This run's requests awaited now, with when each was queued."""
        self._answered_at: float | None = None
        """When this run last took an answer (a ferry's unpacked answers included)."""
        self._stalled: QueueStalled | None = None
        """Set once a wait ran past its bound: every request of this invocation then stops too."""

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
            if self._stalled is not None:
                raise self._stalled
            rid = self.queue.find(self.owner, key)
            earlier, queued_at = None, time.time()
            if rid is not None:  # asked before (a killed or stopped run): its answer is this one's
                entry = self.queue.read("requests", rid) or self.queue.read("claimed", rid) or {}
                earlier = entry.get("request") if isinstance(entry.get("request"), dict) else {}
                queued_at = float(entry.get("queued_at") or queued_at)
            if rid is None:
                rid = new_id()
                self.queue.put({"id": rid, "owner": self.owner, "key": key, "device": pin,
                                "request": request.model_dump(mode="json"), "settings": self._settings(
                                    request, timeout_s, compile_timeout_s)})
            self._mine[rid] = queued_at
            try:
                body = await self._await(rid, on_event)
            finally:
                self._mine.pop(rid, None)
        return slot_of(body), result_of(body, earlier)

    def _settings(self, request: EvalRequest, timeout_s: float, compile_timeout_s: float | None) -> dict[str, Any]:
        c = self.cfg
        return {"timeout_s": timeout_s, "network": c.network,
                "memory_limit_bytes": int(c.memory_limit_gb * 2**30) if c.memory_limit_gb and self._device == "cpu"
                else None, "max_response_bytes": c.max_response_bytes,
                "compile_stage": request.compile_stage if compile_timeout_s else None,
                "compile_timeout_s": compile_timeout_s, "lock_wait_timeout_s": c.lock_wait_timeout_s}

    def waiting(self, rid: str, since: float) -> QueueWait:
        """Where this run's wait for `rid` (begun at `since`) stands."""
        where = {r: ("claimed" if self.queue.path("claimed", r).exists() else "requests") for r in self._mine}
        seen = max((t for t in (self.queue.worker_seen_at(), self._answered_at) if t is not None), default=None)
        return QueueWait(str(self.queue.root), self._mine.get(rid, since), sum(w == "requests" for w in where.values()),
                         sum(w == "claimed" for w in where.values()), seen, max(since, seen or since),
                         self.cfg.queue_wait_s, where.get(rid) == "claimed")

    async def _await(self, rid: str, on_event: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        """The response to `rid`; meanwhile the worker's progress events, or while no worker
        has claimed it, where the wait stands (`QueueWait.text`, as a stage), and the stop
        once no worker was seen for `queue_wait_s`."""
        since = time.time()
        seen, said = 0, ""
        progress = self.queue.path("progress", rid, ".jsonl")
        while True:
            body = self.queue.take(rid)
            if body is not None:
                self._answered_at = time.time()
                return body
            if self._stalled is not None:
                raise self._stalled
            if on_event is not None and progress.exists():
                lines = progress.read_text(encoding="utf-8").splitlines()
                for line in lines[seen:]:
                    try:
                        on_event(json.loads(line))
                    except ValueError:
                        pass
                seen = len(lines)
            self.queue.requeue_expired()
            now = time.time()
            wait = self.waiting(rid, since)
            if on_event is not None and not seen and (text := wait.text(now)) != said:
                said = text
                on_event({"event": "queue", "text": text})
            if wait.bound_s is not None and now - wait.idle_since > wait.bound_s:
                self._stalled = wait.stalled(now)
                raise self._stalled
            await asyncio.sleep(self.cfg.queue_poll_s)

    async def aclose(self) -> None:
        self._sem = None
