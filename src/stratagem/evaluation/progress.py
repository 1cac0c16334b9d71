"""Owns what the parent makes of a worker's progress: who asks for an evaluation (what a
worker waiting on its timing lock is told), and its progress events as stage names, a wait for
the timing lock said as a wait and on whom.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from stratagem.worker_api.protocol import EvalRequest


def owned(req: EvalRequest, label: str) -> EvalRequest:
    """`req` with who asks for it: what a worker waiting on its timing tells its user."""
    return req.model_copy(update={"lock_owner": {"process": os.getpid(), "label": label}})


def waiting_on(holder: Mapping[str, Any] | None) -> str:
    """On whom a worker waits for the timing lock, as the live view says it."""
    if not holder:
        return "other workers' loads and trials (shared holds)"
    label = str(holder.get("label") or "an evaluation")
    if holder.get("process") == os.getpid():
        return f"this run's {label}"
    return f"another process on this machine (pid {holder.get('process') or holder.get('pid')}, {label})"


def stage_events(stage: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    """A worker's progress events as stage names: each stage as it starts, its compiles as
    compiling, a wait for the timing lock as waiting (on whom) until the worker goes on, and
    the judge once the worker is done; before a queue worker starts it, where the wait in the
    queue stands (the queue executor's `queue` events). A name is said once, when it changes."""
    current, shown = ["starting"], ["starting"]

    def say(text: str) -> None:
        if text != shown[0]:
            shown[0] = text
            stage(text)

    def on_event(ev: dict[str, Any]) -> None:
        kind, phase = ev.get("event"), ev.get("phase")
        if kind == "queue" and isinstance(ev.get("text"), str):  # the executor's: no worker has started it
            say(ev["text"])
        elif kind == "start" and isinstance(ev.get("stage"), str):
            current[0] = ev["stage"]
            say(current[0])
        elif kind == "phase" and phase == "wait" and "holder" in ev:
            h = ev.get("holder")
            say(f"{current[0]}: waiting for the timing lock, held by {waiting_on(h if isinstance(h, Mapping) else None)}")
        elif kind == "phase" and phase == "compile":
            say(f"{current[0]}: compiling")
        elif kind == "phase" and phase == "run":
            say(current[0])
        elif kind == "done":
            current[0] = "judge"
            say("judge")  # the worker is done; the judge confirms its outputs

    return on_event
