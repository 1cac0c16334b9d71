"""Owns the shared build cache of `load_inline` extensions: built libraries stored under the
hash of everything that decides them, verified by hash when loaded, and the machine-wide
limit on how many builds run at once.

Standard library only (the worker's wrapper of torch's `load_inline` is
`worker/inline_builds.py`; tests and the benchmark read entries without torch).

An entry is a directory `ROOT/v1/KEY[:2]/KEY/` holding the library (`MODULE.so`) and
`manifest.json` (the key, the module name, the library's SHA-256 and size, what was built:
names, flags and each source's hash, the toolchain). `KEY` is the SHA-256 of the canonical JSON
of the build's inputs: every source text, every flag, the module name, the torch, CUDA, compiler
and Python versions and the device's architecture. Publishing: the harness's wrapper, right
after a build it ran, copies the library into a private temporary directory under ROOT, hashes
it, writes the manifest, makes both read-only and renames the directory into place (atomic; a
racing publisher of the same key loses and keeps the winner's entry). Loading: the wrapper
copies the library into the worker's own build directory, hashes the copy (never the shared
file, which could change between the check and the load) and loads the copy only when the
manifest names this key and the copy's hash is the manifest's; anything else is a rejected
entry: it is moved aside (`ROOT/rejected/`) and the source is built again.

What this protects and what not (docs/timing.md, "Build cache"): corrupt, truncated or
half-written entries, a library changed after it was published, an entry copied under another
key. A process running as the same user can still write a self-consistent entry (the sandbox
has no filesystem jail: `evaluation/sandbox.py`); such a forgery can only replace the code of a
design whose exact sources and flags it predicts, and that design's evaluation still runs every
check on what it loaded. `build_cache = false` turns the cache off.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ENV_VAR = "STRATAGEM_BUILD_CACHE"
"""The cache root the executor slot sets for the worker (`off`: no cache)."""
LAYOUT = "v1"
POLICY_VERSION = 1
"""Part of every key: bumped when the harness changes how it builds (flags it adds)."""
JOBS_PER_BUILD = 2
"""A `load_inline` build compiles at most two units at once (main.cpp and cuda.cu)."""
Outcome = Literal["hit", "built", "rejected", "uncached"]


@dataclass(frozen=True)
class Fetched:
    """What a lookup found: a verified copy of the library, or why the entry was refused."""

    library: Path | None
    module: str | None
    rejected: str | None = None
    """Why an entry that exists was refused (then moved aside), or None."""


@dataclass(frozen=True)
class BuildEvent:
    """One `load_inline` call as the worker saw it (the load stage's `builds` detail)."""

    name: str
    key: str | None
    outcome: Outcome
    build_s: float
    """Seconds in the call: the build on a miss, the copy, check and import on a hit."""
    slot_wait_s: float = 0.0
    """Seconds waiting for a machine-wide build slot (not building)."""
    note: str | None = None
    """Why the call was not cached, or why an entry was rejected."""
    header_diet: str | None = None
    """What the header diet did to the CUDA sources (`header_diet.py`): `lean` or `lightened`
    (built or loaded so), `fell back: ...; built X` (the lighter attempts did not compile, each
    with its first error line), `as written` (built or loaded as written after a lighter
    attempt), `skipped: why`; None: nothing to do."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "key": self.key, "outcome": self.outcome,
                               "build_s": round(self.build_s, 3)}
        if self.slot_wait_s:
            out["slot_wait_s"] = round(self.slot_wait_s, 3)
        if self.note:
            out["note"] = self.note
        if self.header_diet:
            out["header_diet"] = self.header_diet
        return out


def key_of(inputs: Mapping[str, Any]) -> str:
    """The SHA-256 of the canonical JSON of a build's inputs (sources, flags, toolchain)."""
    text = json.dumps({"policy": POLICY_VERSION, **inputs}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _summary(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs as the manifest records them: texts as their hashes."""
    out: dict[str, Any] = {}
    for k, v in inputs.items():
        if isinstance(v, list) and k.endswith("sources"):
            out[k] = [hashlib.sha256(str(s).encode()).hexdigest() for s in v]
        else:
            out[k] = v
    return out


class BuildCache:
    """The cache at `root` (created 0700 on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / LAYOUT / key[:2] / key

    def fetch(self, key: str, dest: Path) -> Fetched:
        """Copy the entry's library to `dest` (a directory of this worker's own) and verify the
        copy; a missing entry is a plain miss, a bad one is moved aside and reported."""
        entry = self.entry(key)
        if not entry.is_dir():
            return Fetched(None, None)
        try:
            manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
            module = str(manifest["module"])
            if manifest.get("key") != key:
                return self._reject(entry, "its manifest names another key")
            if "/" in module or module.startswith("."):
                return self._reject(entry, "its manifest names a module outside the entry")
            lib = entry / f"{module}.so"
            dest.mkdir(parents=True, exist_ok=True)
            tmp = dest / f".{module}.so.{uuid.uuid4().hex}"
            shutil.copyfile(lib, tmp)
            digest = sha256_file(tmp)
            if digest != manifest.get("sha256") or tmp.stat().st_size != manifest.get("bytes"):
                tmp.unlink()
                return self._reject(entry, "the library's hash is not the manifest's")
            final = dest / f"{module}.so"
            os.replace(tmp, final)  # a new inode: a library loaded before is never overwritten
            return Fetched(final, module)
        except (OSError, ValueError, KeyError, TypeError) as e:
            return self._reject(entry, f"unreadable: {type(e).__name__}: {e}")

    def publish(self, key: str, library: Path, module: str, inputs: Mapping[str, Any]) -> Path | None:
        """Store `library` (just built by the harness) as `key`'s entry, read-only; None when
        another publisher got there first or the cache cannot be written (never an error: a
        cache that fails only costs a rebuild)."""
        final = self.entry(key)
        if final.exists():
            return None
        tmp = self.root / "tmp" / f"{key[:16]}-{uuid.uuid4().hex}"
        try:
            self._make_root()
            tmp.mkdir(parents=True)
            shutil.copyfile(library, tmp / f"{module}.so")
            manifest = {"key": key, "module": module, "sha256": sha256_file(tmp / f"{module}.so"),
                        "bytes": (tmp / f"{module}.so").stat().st_size, "inputs": _summary(inputs),
                        "published_at": time.time(), "pid": os.getpid()}
            (tmp / "manifest.json").write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
            for f in tmp.iterdir():
                f.chmod(0o444)
            tmp.chmod(0o555)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(tmp, final)  # fails when a racing publisher's entry is already there
            return final
        except OSError:
            _remove(tmp)
            return None

    def _reject(self, entry: Path, why: str) -> Fetched:
        with contextlib.suppress(OSError):
            aside = self.root / "rejected" / f"{entry.name}-{uuid.uuid4().hex[:8]}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            entry.chmod(0o755)  # a read-only directory cannot be renamed out of its parent on some systems
            os.rename(entry, aside)
        if entry.exists():
            _remove(entry)
        return Fetched(None, None, rejected=why)

    def _make_root(self) -> None:
        if not self.root.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                self.root.chmod(0o700)


def _remove(path: Path) -> None:
    """Remove a (possibly read-only) tree, quietly."""
    if not path.exists():
        return
    for p in [path, *path.rglob("*")]:
        with contextlib.suppress(OSError):
            p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(path, ignore_errors=True)


def concurrent_builds(cores: int) -> int:
    """How many builds may run at once on a machine with `cores` usable cores: each gets
    `JOBS_PER_BUILD`, so all of them together keep every core busy and none oversubscribed."""
    return max(1, cores // JOBS_PER_BUILD)


@contextlib.contextmanager
def build_slot(folder: Path, slots: int,
               waiting: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> Iterator[float]:
    """Hold one of `slots` machine-wide build slots (flock files in `folder`); yields the
    seconds waited. A dead holder's slot is freed with its descriptors. `waiting` is entered
    around a wait (the worker reports it as its `wait` phase)."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    fds = [os.open(folder / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT, 0o600) for i in range(max(1, slots))]
    held: int | None = None
    try:
        held = _try_any(fds)
        if held is None:
            with waiting() if waiting is not None else contextlib.nullcontext():
                held = _wait_any(fds)
        yield time.monotonic() - t0
    finally:
        if held is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(held, fcntl.LOCK_UN)
        for fd in fds:
            os.close(fd)


def _try_any(fds: list[int]) -> int | None:
    """The first of the slots that was free, now held (None: none was)."""
    for fd in fds:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            continue
    return None


def _wait_any(fds: list[int], poll_s: float = 0.05) -> int:
    """Poll the slots until one is free (flock cannot wait on several at once)."""
    while (fd := _try_any(fds)) is None:
        time.sleep(poll_s)
    return fd
