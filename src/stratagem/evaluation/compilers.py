"""Owns telling, from outside, whether a worker is compiling: a compiler process among its
session's processes (nvcc, ptxas, a C or C++ compiler, a linker, ninja).

The sandbox charges a worker's time to the compile limit only while it compiles, judged by what
its processes are doing, never by which call it is in: a first call that sleeps, spins or
deadlocks is running. Builds run compilers as child processes (`load_inline` through ninja,
Triton through ptxas, inductor's C++ through the system compiler); the worker itself reports
torch.compile's in-process compiles (`worker/stages.py`). Linux `/proc` only; elsewhere nothing
is ever seen compiling, and compiles count as running.
"""

from __future__ import annotations

import os
import re

_COMPILER = re.compile(
    r"^(?:[\w.-]+-)?(?:gcc|g\+\+|c\+\+|cc|cc1|cc1plus|clang|clang\+\+|ld|ld\.gold|ld\.lld|collect2|as|"
    r"nvcc|cicc|ptxas|fatbinary|nvlink|cudafe\+\+|ninja|make|cmake)(?:-[\d.]+)?$"
)
"""A process name (`comm`, at most 15 characters) that is a compiler, an assembler, a linker or
a build tool, versioned (`g++-13`) or prefixed by a target (`x86_64-linux-gnu-gcc-13`) or not."""


def is_compiler(comm: str) -> bool:
    return bool(_COMPILER.match(comm.strip()))


def compilers_in_session(sid: int, proc: str = "/proc") -> list[str]:
    """The names of compiler processes in session `sid` (the worker's: it starts one), or []."""
    out: list[str] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        left, right = stat.find("("), stat.rfind(")")
        if left < 0 or right < left:
            continue
        fields = stat[right + 2:].split()
        if len(fields) > 3 and fields[3].lstrip("-").isdigit() and int(fields[3]) == sid:
            comm = stat[left + 1:right]
            if is_compiler(comm):
                out.append(comm)
    return out
