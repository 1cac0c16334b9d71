"""Owns the queue worker: `python -m stratagem.evaluation.queue_worker --queue DIR` (also
`stratagem worker --queue DIR`), run on the machine with the GPUs.

It claims requests from the queue folder (evaluation/queue.py), `--slots` at a time (default
2 on a GPU, as the local executor's `workers_per_gpu`, so one compiles outside the device lock
while another times), evaluates each once in the same sandbox as the local executor (a slot of
its own: visible device, compile caches, the device's shared/exclusive lock, timing cores),
keeps its claim's lease fresh while it runs, and writes the response. It exits when the queue is empty (`--once`) or when its time
is up (`--max-seconds`; a request already started is finished). Several workers may serve one
queue, one per GPU (`--device cuda:N`). Standard library only, plus the worker stages' torch:
no LLM library, no pydantic, no network.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stratagem.evaluation.queue import QueueDir
from stratagem.evaluation.sandbox import SandboxSettings, run_worker
from stratagem.evaluation.slots import Slot, make_slots
from stratagem.evaluation.spares import SPARE_MODES, Spares, wanted
from stratagem.worker_api.places import cache_root

SETTINGS = ("timeout_s", "network", "memory_limit_bytes", "max_response_bytes", "compile_stage",
            "compile_timeout_s", "lock_wait_timeout_s")
"""The sandbox settings a request carries (the run's configuration, applied here)."""


def worker_slots(device: str, n: int) -> list[Slot]:
    """`n` slots on `device`, each with caches of its own and the device's one timing lock (as
    the local executor's `workers_per_gpu`): while one compiles outside the lock, another times."""
    dev = "cuda:0" if device == "cuda" else device
    return make_slots([dev], cache_root(os.environ), {dev: n}, platform.node() or "host")


class Crew:
    """The spare workers of every slot thread of this worker (one event loop each): a request
    that runs alone kills them all and none starts until it has ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: list[tuple[asyncio.AbstractEventLoop, Spares]] = []
        self.alone = 0

    def join(self, spares: Spares) -> None:
        with self._lock:
            self._members.append((asyncio.get_running_loop(), spares))

    def begin_alone(self) -> None:
        with self._lock:
            self.alone += 1
            for loop, spares in self._members:
                loop.call_soon_threadsafe(spares.kill_all)

    def end_alone(self) -> None:
        with self._lock:
            self.alone -= 1


async def evaluate(entry: dict[str, Any], slot: Slot, progress: Path | None = None,
                   spares: Spares | None = None, crew: Crew | None = None) -> dict[str, Any]:
    """Run one request in this worker's slot: the response body (the slot and the sandbox's
    result); the worker's stage events are appended to `progress` as they come (the run's
    live view reads them). With `spares`, the slot's spare worker runs it when it fits (made
    for a request of the same kind), and the slot's next spare starts meanwhile (not for a
    request that runs alone: the device's spares are killed first)."""
    req = {**entry["request"], **slot.prepare()}
    given = dict(entry.get("settings") or {})

    def on_event(ev: dict[str, Any]) -> None:
        if progress is not None:
            with open(progress, "a", encoding="utf-8") as f:
                f.write(json.dumps(ev) + "\n")

    settings = SandboxSettings(base_env=dict(os.environ), slot_env=slot.env, cache_dir=slot.caches, on_event=on_event,
                               **{k: given[k] for k in SETTINGS if k in given and given[k] is not None})
    req_json = json.dumps(req)
    ahead = None
    alone = bool(req.get("alone")) and crew is not None
    if alone and crew is not None:
        crew.begin_alone()
        if spares is not None:
            await spares.close()
    elif spares is not None and not (crew is not None and crew.alone):
        ahead = spares.take(slot.index, req_json, settings)
        spares.start(slot.index, req_json, settings, slot.device, str(slot.lock_path) if slot.lock_path else None,
                     slot.reserved_cores)
    try:
        result = await run_worker(req_json, settings, ahead)
    finally:
        if alone and crew is not None:
            crew.end_alone()
    return {"owner": entry.get("owner"), "key": entry.get("key"),
            "slot": {"index": slot.index, "device": slot.device, "physical": slot.physical, "host": slot.host,
                     "env": dict(slot.env), "lock_path": str(slot.lock_path) if slot.lock_path else None,
                     "timing_cores": list(slot.timing_cores), "reserved_cores": list(slot.reserved_cores)},
            "result": dataclasses.asdict(result)}


def serve(queue: QueueDir, device: str, *, once: bool, max_seconds: float | None, poll_s: float,
          name: str | None = None, log: Any = print, slots: int = 1, spare_workers: str = "gpu") -> int:
    """Claim, evaluate and answer until the queue is empty (`once`) or `max_seconds` passed,
    `slots` requests at once (each in a slot of its own on the device, sharing its timing lock;
    each slot's next worker started ahead where `spare_workers` says, `evaluation/spares.py`).
    Returns how many requests it answered."""
    t0 = time.monotonic()
    answered = [0]
    count = threading.Lock()
    crew = Crew()

    async def loop(slot: Slot) -> None:
        me = name or f"{platform.node()}:{os.getpid()}:{slot.physical}"
        me = me if slots == 1 else f"{me}/w{slot.index}"
        spares = Spares() if wanted(spare_workers, slot.physical) else None
        if spares is not None:
            crew.join(spares)
        try:
            while max_seconds is None or time.monotonic() - t0 < max_seconds:
                queue.requeue_expired()
                got = queue.claim(me, slot.physical)
                if got is None:
                    if once and queue.pending() == 0:
                        break
                    await asyncio.sleep(poll_s)
                    continue
                rid, entry = got
                log(f"stratagem worker {me}: evaluating {rid[:12]}")
                stop = threading.Event()

                def beat(rid: str = rid, stop: threading.Event = stop) -> None:
                    while not stop.wait(max(0.5, queue.lease_s / 4)):
                        queue.renew(rid, me)

                threading.Thread(target=beat, daemon=True).start()
                try:
                    body = await evaluate(entry, slot, queue.path("progress", rid, ".jsonl"), spares, crew)
                except Exception as e:  # noqa: BLE001 - the run gets a harness failure, the worker goes on
                    body = {"owner": entry.get("owner"), "key": entry.get("key"), "error": f"{type(e).__name__}: {e}"}
                finally:
                    stop.set()
                queue.respond(rid, {**body, "worker": me, "request": entry.get("request")})  # what it answers
                with count:
                    answered[0] += 1
        finally:
            if spares is not None:
                await spares.close()

    threads = [threading.Thread(target=asyncio.run, args=(loop(slot),), daemon=True)
               for slot in worker_slots(device, slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answered[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stratagem worker", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--queue", required=True, help="the queue directory the run writes to")
    ap.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N (default cuda)")
    ap.add_argument("--once", action="store_true", help="exit when the queue is empty")
    ap.add_argument("--max-seconds", type=float, default=None, help="exit after this long (a started request is finished)")
    ap.add_argument("--poll-s", type=float, default=0.5, help="seconds between looks at an empty queue")
    ap.add_argument("--lease-s", type=float, default=60.0, help="a claim not renewed for this long is redone elsewhere")
    ap.add_argument("--spares", choices=SPARE_MODES, default="gpu",
                    help="where each slot's next worker is started ahead of its request (default gpu: GPU slots only)")
    ap.add_argument("--slots", type=int, default=None,
                    help="requests evaluated at once on the device, sharing its timing lock, so one compiles while "
                         "another times (default 2 on a GPU, as workers_per_gpu; 1 on the CPU)")
    args = ap.parse_args(argv)
    if args.slots is not None and args.slots < 1:
        print(f"--slots {args.slots}: give 1 or more", file=sys.stderr)
        return 2
    if args.device not in ("cpu", "cuda") and not (args.device.startswith("cuda:") and args.device[5:].isdigit()):
        print(f"--device {args.device!r}: give cpu, cuda or cuda:N", file=sys.stderr)
        return 2
    slots = args.slots if args.slots is not None else (1 if args.device == "cpu" else 2)
    n = serve(QueueDir(args.queue, lease_s=args.lease_s), args.device, once=args.once,
              max_seconds=args.max_seconds, poll_s=args.poll_s, slots=slots,
              spare_workers=args.spares)
    print(f"stratagem worker: {n} requests answered", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
