"""Owns the build directory a candidate's extensions compile in: no dead build blocks a later one.

Worker-side only. torch builds a `load_inline` extension under its build root (the slot's
`TORCH_EXTENSIONS_DIR`) behind a baton, a `NAME/lock` file created with O_EXCL and removed when
the build ends; a build killed in between (a timeout, a kill from outside) leaves the file, and
every later build of that extension waits for it forever (it was still there forty minutes
later, and each evaluation of the source slept until its compile limit).

A worker that loads a candidate first claims the build root for the rest of its life: an
exclusive `flock` on a file there, which the kernel drops when the process ends, however it
ends. Holding it, no other process of any run can be building there, so every baton found is a
dead build's and is removed. Workers that share a build root (one slot of two runs on the
same machine) take turns; the wait is reported as waiting, like a lock wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

import torch  # noqa: F401 - worker-side (torch.utils.cpp_extension only where the slot sets no root)

CLAIM_FILE = ".stratagem-builds.lock"
_held: list[int] = []
"""Descriptors of the claims this process holds (kept open until it exits)."""


def build_root() -> Path:
    """torch's extension build root for this process, found as torch finds it: the slot's
    TORCH_EXTENSIONS_DIR, else torch's default."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR", "")
    if root:
        return Path(root)
    import torch.utils.cpp_extension  # 0.3 s of imports (setuptools): only when needed

    return Path(torch.utils.cpp_extension.get_default_build_root())


def claim(root: Path | None = None) -> list[str]:
    """Hold `root` (default: torch's build root) for the rest of this process, then remove
    every build baton in it, all of them dead builds'. Returns the extensions whose baton was
    removed. Idempotent within a process."""
    root = root if root is not None else build_root()
    if not _held:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / CLAIM_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held.append(fd)
    removed = []
    for baton in sorted(root.glob("*/lock")):
        with contextlib.suppress(OSError):
            baton.unlink()
            removed.append(baton.parent.name)
    return removed
