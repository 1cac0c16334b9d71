"""Owns the Design record: one immutable candidate, identified by the hash of its content."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratagem.core.problem import content_hash

FILE_MARKER = "=== stratagem file: {name} ==="
"""The line that opens each file of a design written as one text (agents, prompts, views):
a design of several files is its files in name order, each under this line."""
_MARKER = re.compile(r"^=== stratagem file: (\S+) ===[ \t]*$", re.MULTILINE)


def files_text(files: Mapping[str, str]) -> str:
    """A design's files as one text: a single file's text as it is; several, each under its
    `FILE_MARKER` line, in name order (what `text_files` reads back; a file not ending in a
    line break gets one)."""
    if len(files) == 1:
        return next(iter(files.values()))
    return "".join(f"{FILE_MARKER.format(name=n)}\n{t}{'' if t.endswith(chr(10)) else chr(10)}"
                   for n, t in sorted(files.items()))


def text_files(text: str, main: str) -> dict[str, str]:
    """The files of a design written as one text: the sections under `FILE_MARKER` lines when
    it has any (text before the first is dropped when blank, else kept as `main`), else the
    whole text as the file `main`."""
    marks = list(_MARKER.finditer(text))
    if not marks:
        return {main: text}
    out: dict[str, str] = {}
    head = text[: marks[0].start()]
    if head.strip():
        out[main] = head
    for m, nxt in zip(marks, [*marks[1:], None], strict=True):
        body = text[m.end() + 1 : nxt.start() if nxt is not None else len(text)]
        out[m.group(1)] = body
    return out


LINE_COMMENTS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cu", ".cuh", ".rs", ".go", ".js", ".ts", ".java"), "//"),
    ((".py", ".sh", ".bash", ".toml", ".yaml", ".yml", ".cmake", ".mk", ".r", ".pl", ".rb"), "#"),
    ((".f90", ".f95"), "!"),
)
"""A line comment per file suffix (exported files carry their provenance in their own syntax)."""
HASH_NAMES = frozenset({"Makefile", "makefile", "GNUmakefile", "CMakeLists.txt", "Dockerfile"})


def line_comment(name: str) -> str | None:
    """How a file called `name` starts a line comment (`//` for C/C++/CUDA, `#` for Python and
    shell, ...); None when its language is not known (a data file takes no comment)."""
    base = name.rsplit("/", 1)[-1]
    if base in HASH_NAMES:
        return "#"
    suffix = "." + base.rsplit(".", 1)[-1].lower() if "." in base else ""
    return next((mark for suffixes, mark in LINE_COMMENTS if suffix in suffixes), None)


def with_header(name: str, text: str, lines: list[str]) -> str | None:
    """`text` headed by `lines` as line comments in the syntax of `name` (None: it has none).
    A `#!` line stays first."""
    mark = line_comment(name)
    if mark is None:
        return None
    head = "".join(f"{mark} {ln}".rstrip() + "\n" for ln in lines) + "\n"
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        return f"{first}\n{head}{rest}"
    return head + text


@dataclass(frozen=True)
class Design:
    """A candidate solution: its files, its parents and where it came from."""

    files: Mapping[str, str]
    """File name -> text (a PyTorch candidate: one file, `candidate.py`; a command design: its
    editable files)."""
    parent_ids: tuple[str, ...] = ()
    """Ids of the designs it was derived from."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Who made it and how: role, model, prompt hash, strategy, or `file` for user input."""

    @property
    def id(self) -> str:
        """Content hash of the files (names and texts); parents and provenance excluded."""
        return content_hash(json.dumps(dict(sorted(self.files.items())), ensure_ascii=False))
