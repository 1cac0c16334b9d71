"""Parsing from several threads at once (pydantic-ai runs sync output validators and tools in
worker threads, so two Implementors' static checks parse concurrently). On CPython 3.11 a
garbage collection inside one thread's `ast.parse` that runs a finalizer lets another thread
parse, and the first fails with `SystemError: AST constructor recursion depth mismatch`
(python/cpython#106905): seen in a run under load as an Implementor's call failing and its
design never written. `pysyntax.parse` takes one parse at a time."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stratagem.core import pysyntax

SOURCE = (Path(pysyntax.__file__).parents[1] / "domains/pytorch/static/checks.py").read_text()


class _Cycle:
    """Cyclic garbage whose finalizer yields the GIL (as asyncio's or pydantic's may)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _race(parse: Callable[[str], object], threads: int = 4, rounds: int = 200) -> list[str]:
    """Each thread leaves cyclic garbage behind, then parses: a collection starts inside
    the parse. The SystemErrors raised."""
    errors: list[str] = []
    made = threading.Lock()

    def work() -> None:
        for _ in range(rounds):
            with made:  # the garbage survives until the parse allocates
                gc.disable()
                for _ in range(30):
                    _Cycle()
                gc.enable()
            try:
                parse(SOURCE)
            except SystemError as e:
                errors.append(str(e))
                return

    old = gc.get_threshold()
    gc.set_threshold(100, 1, 1)
    try:
        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        gc.set_threshold(*old)
        gc.collect()
    return errors


def test_parsing_from_many_threads_never_fails() -> None:
    assert _race(pysyntax.parse) == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the race is CPython 3.11's")
def test_the_race_is_real_without_the_lock() -> None:
    """The control: the same load on plain `ast.parse` fails, so the test above tests something."""
    assert any("recursion depth mismatch" in e for e in _race(ast.parse)), "the race did not reproduce"
