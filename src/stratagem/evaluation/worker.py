"""Owns the worker entry point: `python -m stratagem.evaluation.worker REQUEST RESPONSE PROGRESS`,
or, started ahead of its request (`evaluation/spares.py`), `... --ahead MODULE DEVICE LOCK
REQUEST RESPONSE PROGRESS`: it imports MODULE and calls its `start_ahead(device)` where it has
one (PyTorch: the CUDA context), on the CPU holding the device's LOCK shared meanwhile (so it
never imports beside a timed section; `-`: no lock), then waits for `go` on its stdin before it
reads REQUEST. Either way the process serves one request and ends.

Runs in the sandbox, in a fresh process. Reads one request (plain JSON), runs the domain's
worker stages, appends one JSON line per stage event to PROGRESS (so a crash mid-way still
leaves the finished stages' results), and writes the response JSON to RESPONSE atomically.
The domain's worker module is the one the request names (`worker_module`: the domain declares
it, `Domain.worker.module`, and the parent writes it into the request), so no domain is named
here and the domain registry, which needs pydantic, is never loaded. Imports only the standard
library and that module (with what it imports: torch, numpy, triton for PyTorch): GPU machines
may have nothing else.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

PROTOCOL_VERSION = 3
"""Of the request (an envelope since 2, naming its worker and judge modules since 3); the
response is still protocol 1."""
RESPONSE_PROTOCOL = 1


def progress_emitter(path: Path) -> tuple[Callable[[str, dict[str, Any]], None], Callable[[], None]]:
    """An `emit(event, data)` appending one JSON line per event to `path` (flushed at once, so
    a crash still leaves what came before), and the function that closes it."""
    progress = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def emit(event: str, data: dict[str, Any]) -> None:
        progress.write(json.dumps({"event": event, "t": time.time(), **data}) + "\n")
        progress.flush()

    return emit, progress.close


def write_json_atomic(path: Path, body: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, allow_nan=True), encoding="utf-8")
    os.replace(tmp, path)


def serve(module: str, run: Callable[[Any, Callable[[str, dict[str, Any]], None]], dict[str, Any]],
          progress_path: Path, response_path: Path, done: bool) -> NoReturn:
    """Import `module` (a domain's worker or judge module), `run(module, emit)` with events
    appended to `progress_path`, write what it returns to `response_path` atomically (then a
    `done` event, if `done`), and end the process at once."""
    emit, close = progress_emitter(progress_path)
    body = run(importlib.import_module(module), emit)
    write_json_atomic(response_path, body)
    if done:
        emit("done", {})
    close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate extensions and CUDA contexts can hang or crash in
    # their destructors after a complete response was written.
    os._exit(0)


def wait_for_request(module: str, device: str, lock: str) -> bool:
    """Started ahead: import `module` and warm it for `device` (its `start_ahead`, if any; on
    the CPU under `lock` held shared), then wait for the word on stdin. False: the parent
    closed it without one (the worker is not needed)."""
    from contextlib import nullcontext

    held: Any = nullcontext()
    if device == "cpu" and lock != "-":
        from stratagem.worker_api.device_lock import DeviceLock

        held = DeviceLock(lock).hold("shared", owner={"started_ahead": os.getpid()})
    with held:
        warm = getattr(importlib.import_module(module), "start_ahead", None)
        if warm is not None:
            warm(device)
    word = sys.stdin.readline().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)  # the design reads no pipe of the harness's
    os.dup2(devnull, 0)
    os.close(devnull)
    return word == "go"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--ahead"] and len(argv) == 7:
        module, device, lock = argv[1:4]
        if not wait_for_request(module, device, lock):
            os._exit(0)  # no teardown of what it imported: nothing ran
        argv = argv[4:]
    if len(argv) != 3:
        print("usage: python -m stratagem.evaluation.worker [--ahead MODULE DEVICE LOCK] REQUEST RESPONSE PROGRESS",
              file=sys.stderr)
        return 2
    request_path, response_path, progress_path = (Path(a) for a in argv)
    request = json.loads(request_path.read_text(encoding="utf-8"))
    if request.get("protocol") != PROTOCOL_VERSION:
        print(f"protocol mismatch: {request.get('protocol')} != {PROTOCOL_VERSION}", file=sys.stderr)
        return 3
    record_dir = response_path.parent / "record"  # the candidate outputs the judge checks, beside the response

    def run(module: Any, emit: Callable[[str, dict[str, Any]], None]) -> dict[str, Any]:
        body = module.run_request(request, Path.cwd(), emit, record_dir=record_dir)
        return {"protocol": RESPONSE_PROTOCOL, "request_id": request["request_id"], **body}

    serve(str(request["worker_module"]), run, progress_path, response_path, done=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
