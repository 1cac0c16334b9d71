"""Owns where a machine keeps stratagem's caches, locks and builds (`cache_root`): the
configured folder, else `$STRATAGEM_CACHE_DIR`, else the user's cache folder. Standard library
only, so the parent's configuration (`config.cache_dir`) and a queue worker on a GPU host
(`evaluation/queue_worker.py`, no pydantic there) resolve it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def cache_root(env: Mapping[str, str], configured: str | Path | None = None) -> Path:
    """`configured` when given; else `STRATAGEM_CACHE_DIR` in `env`; else
    `$XDG_CACHE_HOME/stratagem` (default `~/.cache/stratagem`)."""
    if configured is not None:
        return Path(configured).expanduser()
    if env.get("STRATAGEM_CACHE_DIR"):
        return Path(env["STRATAGEM_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stratagem"
