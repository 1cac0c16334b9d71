"""Owns the domain registry: the kinds of program being optimised, keyed on `Problem.domain`.

The generic layers ask `get_domain(problem.domain)` for everything domain-specific
(`domains/base.py`: the Domain protocol) and never import a concrete domain. Built-in domains
are imported on first use; `register` adds one (a plug-in, or a test's toy domain).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from stratagem.errors import ProblemError

if TYPE_CHECKING:
    from stratagem.core.problem import Problem
    from stratagem.domains.base import Domain

BUILTIN = {"pytorch": "stratagem.domains.pytorch.domain", "command": "stratagem.domains.command.domain"}
"""Domain name -> the module whose `DOMAIN` implements it."""
DEFAULT = "pytorch"

_registered: dict[str, Domain] = {}


def register(domain: Domain) -> None:
    """Make `domain` available under `domain.name` (replacing one of that name)."""
    _registered[domain.name] = domain


def unregister(name: str) -> None:
    _registered.pop(name, None)


def get_domain(name: str) -> Domain:
    """The domain called `name`.

    Raises:
        ProblemError: no such domain.
    """
    if name not in _registered and name in BUILTIN:
        register(importlib.import_module(BUILTIN[name]).DOMAIN)
    try:
        return _registered[name]
    except KeyError:
        raise ProblemError(f"no domain is called {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    return sorted({*BUILTIN, *_registered})


def load_problem(path: str | Path) -> Problem:
    """Load a problem file with the first domain that claims it (registered ones first, then
    the built-in ones).

    Raises:
        ProblemError: no domain claims the file, or the domain rejects it.
    """
    p = Path(path)
    for name in [*[n for n in _registered if n not in BUILTIN], *BUILTIN]:
        d = get_domain(name)
        if d.claims(p):
            return d.load_problem(p)
    raise ProblemError(f"{p}: no domain reads this kind of file (domains: {', '.join(names())}); "
                       "a PyTorch problem is a KernelBench-format .py file, a command problem a directory "
                       "with problem.toml (docs/command.md)")


def parse_problem(source: str, *, name: str, path: str | None = None, domain: str = DEFAULT) -> Problem:
    """Check a problem's source with the domain that stored it."""
    return get_domain(domain).parse_problem(source, name=name, path=path)
