"""Owns the Design record: one immutable candidate, identified by the hash of its content."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratagem.core.problem import content_hash

MAIN_FILE = "candidate.py"


@dataclass(frozen=True)
class Design:
    """A candidate solution: its files, its parents and where it came from."""

    files: Mapping[str, str]
    """File name -> text. A PyTorch candidate has one file, `candidate.py`."""
    parent_ids: tuple[str, ...] = ()
    """Ids of the designs it was derived from."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Who made it and how: role, model, prompt hash, strategy, or `file` for user input."""

    @classmethod
    def from_source(cls, source: str, **kwargs: Any) -> Design:
        return cls(files={MAIN_FILE: source}, **kwargs)

    @property
    def source(self) -> str:
        """The main file's text."""
        return self.files[MAIN_FILE]

    @property
    def id(self) -> str:
        """Content hash of the files (names and texts); parents and provenance excluded."""
        return content_hash(json.dumps(dict(sorted(self.files.items())), ensure_ascii=False))
