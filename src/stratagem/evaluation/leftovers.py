"""Owns reading what a sandboxed process left in its directory, trusting none of it
(evaluation/sandbox.py): the tails of its stdout and stderr, its progress events (JSON lines,
up to a limit) and its response, read only if it is a regular file under the size limit.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

TAIL_CHARS = 6000


def _tail(path: Path) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            fh.seek(max(0, size - TAIL_CHARS * 2))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return text[-TAIL_CHARS:]


def _read_progress(path: Path, limit: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh.read(limit).splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    obj = json.loads(line)
                    if isinstance(obj, dict):
                        events.append(obj)
    except OSError:
        pass
    return events


def _read_response(path: Path, limit: int) -> tuple[str | None, str | None]:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, "the worker wrote no response"
    if not path.is_file() or path.is_symlink():
        return None, "the response is not a regular file"
    if st.st_size > limit:
        return None, f"the response is {st.st_size} bytes, over the {limit}-byte limit"
    try:
        return path.read_text(encoding="utf-8"), None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"the response is unreadable: {e}"
