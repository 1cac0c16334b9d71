"""Owns the queue folder: evaluation requests and responses passed through a shared directory
between a run (where the LLM is reachable) and `stratagem worker` processes (where the GPUs
are), with nothing else between them (docs/queue.md). Standard library only: the worker side
runs where only torch, triton and the standard library exist.

Layout under the queue directory:
- `requests/<id>.json`: a request waiting (written to `tmp/` then renamed: atomic);
- `claimed/<id>.json` and `claimed/<id>.lease`: a worker took it (the rename is the claim, so
  one worker wins) and keeps its lease fresh while it evaluates;
- `responses/<id>.json`: the worker's response (atomic), until the run takes it;
- `consumed/<id>.json`: responses a run has read (kept, not reused).

A claim whose lease expired (its worker was killed) goes back to `requests/`, so the request
is redone once. A request carries its owner (the run directory) and a key (what it asks: the
design's files, the stages, the problem); a resumed run that asks again for what its killed
self had asked finds the waiting request or its unread response instead of queueing a second
one. A response nobody asked for is left where it is. Files that are not the queue's own (a
bad name, not JSON, another version) are ignored with one warning each.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERSION = 1
DIRS = ("requests", "claimed", "responses", "consumed", "tmp", "progress")
_NAME = re.compile(r"^[0-9a-f]{32}\.json$")


def new_id() -> str:
    return uuid.uuid4().hex


def _mtime(path: Path) -> float | None:
    """When `path` was last written; None when it is gone (another process of the queue, a
    worker or a run, may remove any file at any moment)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


class QueueDir:
    """One queue directory (created on first use)."""

    def __init__(self, root: str | Path, *, lease_s: float = 60.0, warn: Any = None) -> None:
        self.root = Path(root)
        self.lease_s = lease_s
        self._warned: set[str] = set()
        self._warn = warn or (lambda msg: print(f"stratagem queue: {msg}", file=sys.stderr))
        for d in DIRS:
            (self.root / d).mkdir(parents=True, exist_ok=True)

    def path(self, where: str, rid: str, suffix: str = ".json") -> Path:
        return self.root / where / f"{rid}{suffix}"

    # -- writing --------------------------------------------------------------------------

    def write_atomic(self, path: Path, body: dict[str, Any]) -> None:
        tmp = self.root / "tmp" / f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps(body, allow_nan=True), encoding="utf-8")
        os.replace(tmp, path)

    def put(self, entry: dict[str, Any]) -> str:
        """Queue a request entry (its `id`, `owner`, `key`, `request`, `settings`, `device`)."""
        rid = str(entry["id"])
        self.write_atomic(self.path("requests", rid), {"version": VERSION, **entry, "queued_at": time.time()})
        return rid

    # -- reading, with foreign files ignored ---------------------------------------------

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            self._foreign(path, f"not a queue file ({e})")
            return None
        if not isinstance(body, dict) or body.get("version") != VERSION or not isinstance(body.get("id"), str):
            self._foreign(path, f"not a version-{VERSION} queue file")
            return None
        return body

    def _foreign(self, path: Path, why: str) -> None:
        if str(path) not in self._warned:
            self._warned.add(str(path))
            self._warn(f"ignoring {path}: {why}")

    def entries(self, where: str) -> Iterator[tuple[str, Path]]:
        """(id, path) of the queue's own files in `where`, oldest first; others warned about."""
        d = self.root / where
        try:
            files = sorted(d.iterdir(), key=lambda p: (_mtime(p) or 0.0, p.name))
        except FileNotFoundError:
            return
        for p in files:
            if where == "claimed" and p.suffix == ".lease":
                continue
            if not _NAME.match(p.name):
                self._foreign(p, "its name is not <32 hex digits>.json")
                continue
            yield p.stem, p

    def read(self, where: str, rid: str) -> dict[str, Any] | None:
        return self._read(self.path(where, rid))

    # -- the worker's side ---------------------------------------------------------------

    def claim(self, worker: str, device: str) -> tuple[str, dict[str, Any]] | None:
        """Take the oldest request this worker can serve (`device`: `cpu`, `cuda`), or None."""
        for rid, path in self.entries("requests"):
            body = self._read(path)
            if body is None:
                continue
            want = str(body.get("device") or "")
            if want and not device_matches(want, device):
                continue
            target = self.path("claimed", rid)
            try:
                os.rename(path, target)  # the claim: one worker wins
            except FileNotFoundError:
                continue
            self.renew(rid, worker)
            return rid, body
        return None

    def renew(self, rid: str, worker: str) -> None:
        """Keep the lease of a claimed request fresh (`lease_s` from now)."""
        self.write_atomic(self.path("claimed", rid, ".lease"),
                          {"version": VERSION, "id": rid, "worker": worker, "expires_at": time.time() + self.lease_s})

    def respond(self, rid: str, body: dict[str, Any]) -> None:
        """The worker's response; its claim ends. A response already there is kept (first wins)."""
        target = self.path("responses", rid)
        if not target.exists() and not self.path("consumed", rid).exists():
            self.write_atomic(target, {"version": VERSION, "id": rid, **body, "answered_at": time.time()})
        for p in (self.path("claimed", rid), self.path("claimed", rid, ".lease")):
            p.unlink(missing_ok=True)

    def accept(self, body: dict[str, Any]) -> bool:
        """An answer written by a worker that served a copy of this queue elsewhere (the ferry:
        a GPU reached only by batch calls, docs/usage.md): kept as the request's response
        unless it already has one (first wins), and its request, waiting here still, removed
        so that nothing serves it twice. Whether it was kept."""
        rid = str(body.get("id") or "")
        if body.get("version") != VERSION or not _NAME.match(f"{rid}.json"):
            return False
        kept = not self.path("responses", rid).exists() and not self.path("consumed", rid).exists()
        if kept:
            self.write_atomic(self.path("responses", rid), body)
        for p in (self.path("requests", rid), self.path("claimed", rid), self.path("claimed", rid, ".lease")):
            p.unlink(missing_ok=True)
        return kept

    # -- both sides ----------------------------------------------------------------------

    def requeue_expired(self, now: float | None = None) -> list[str]:
        """Claims whose lease expired (their worker died) go back to `requests/`."""
        now = time.time() if now is None else now
        back = []
        for rid, path in list(self.entries("claimed")):
            lease = self._read(self.path("claimed", rid, ".lease"))
            claimed_at = _mtime(path)
            if claimed_at is None:  # answered meanwhile: its claim and lease are gone
                continue
            expires = float(lease.get("expires_at", 0.0)) if lease else claimed_at + self.lease_s
            if expires > now:
                continue
            try:
                os.rename(path, self.path("requests", rid))
            except FileNotFoundError:
                continue
            self.path("claimed", rid, ".lease").unlink(missing_ok=True)
            back.append(rid)
        return back

    def pending(self) -> int:
        """Requests waiting or claimed."""
        return sum(1 for _ in self.entries("requests")) + sum(1 for _ in self.entries("claimed"))

    def count(self, where: str) -> int:
        """The queue's own files in `where` (names only: no file is read)."""
        try:
            return sum(1 for p in (self.root / where).iterdir() if _NAME.match(p.name))
        except FileNotFoundError:
            return 0

    def oldest(self, where: str) -> float | None:
        """When the oldest of the queue's own files in `where` was written (None: none)."""
        return next((t for _, p in self.entries(where) if (t := _mtime(p)) is not None), None)

    def worker_seen_at(self) -> float | None:
        """When a worker last touched the queue: a claim, a lease renewed, a progress file or
        an answer each changes the folder it lands in (`claimed/`, `progress/`, `responses/`),
        so the newest of their folders' own times says it without reading a file. None while
        none changed since the queue's folders were made (the root's own time: when its last
        folder was made)."""
        seen = max((t for d in ("claimed", "progress", "responses") if (t := _mtime(self.root / d)) is not None),
                   default=None)
        made = _mtime(self.root)
        return seen if seen is not None and (made is None or seen > made + 1e-3) else None

    # -- the run's side ------------------------------------------------------------------

    def find(self, owner: str, key: str) -> str | None:
        """A request of `owner` asking for `key` that is still waiting, claimed, or answered
        and unread (what a killed run had asked for)."""
        for where in ("responses", "claimed", "requests"):
            for rid, path in self.entries(where):
                body = self._read(path)
                if body is None:
                    continue
                if body.get("owner") == owner and body.get("key") == key:  # responses carry both
                    return rid
        return None

    def take(self, rid: str) -> dict[str, Any] | None:
        """The response to `rid`, moved to `consumed/` (read once), or None while there is none."""
        path = self.path("responses", rid)
        body = self._read(path)
        if body is None:
            return None
        try:
            os.replace(path, self.path("consumed", rid))
        except FileNotFoundError:
            pass
        return body


def device_matches(want: str, have: str) -> bool:
    """A request pinned to `want` (`cpu`, `cuda`, `cuda:1`) can run on a worker serving `have`."""
    if want == have:
        return True
    return want.split(":")[0] == have.split(":")[0] and ":" not in want
