"""Owns the Problem record: what is to be made faster, as the harness and the agents see it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def content_hash(text: str) -> str:
    """Hex sha256 of UTF-8 text: the identity of sources and artifacts."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Problem:
    """One problem, loaded and checked, but never executed in the parent process."""

    name: str
    """Short name, from the file name (`19_ReLU`)."""
    domain: str
    """The domain plug-in that owns it (`pytorch`)."""
    source: str
    """The reference program's full source text."""
    path: str | None = None
    """Where it was loaded from, if from a file."""
    size_constants: Mapping[str, int | float] = field(default_factory=dict)
    """Module-level numeric constants (`batch_size = 16`): the visible shapes."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Per-problem harness settings declared in the file (validators, tolerances, trials)."""

    @property
    def id(self) -> str:
        """Content hash of the source: two files with the same text are the same problem."""
        return content_hash(self.source)
