"""Owns the domain registry: the kinds of program being optimised, keyed on `Problem.domain`.

The generic layers ask `get_domain(problem.domain)` for everything domain-specific
(`domains/base.py`: the Domain protocol) and never import a concrete domain. Built-in domains
are imported on first use; `register` adds one (a plug-in, or a test's toy domain).

A worker or judge process imports its domain's worker modules, and so this package: it loads
only the standard library here (pydantic and the config only when a section is checked).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratagem.errors import ConfigError, ProblemError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from stratagem.config import EvaluationConfig
    from stratagem.core.problem import Problem
    from stratagem.domains.base import BaselineNames, Domain

BUILTIN = {"pytorch": "stratagem.domains.pytorch.domain", "command": "stratagem.domains.command.domain"}
"""Domain name -> the module whose `DOMAIN` implements it."""

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


def names_of(domain: str | None) -> BaselineNames:
    """How the views name the baselines of a run of `domain` (`BaselineNames`); None, where no
    one domain is known (a suite of several, a run not started): the domain-free words, no
    compared baseline, never another domain's."""
    if domain is not None:
        return get_domain(domain).names
    from stratagem.domains.base import BaselineNames  # pydantic: parent side only

    return BaselineNames()


def names() -> list[str]:
    return sorted({*BUILTIN, *_registered})


def claimant(path: str | Path) -> Domain | None:
    """The first domain that claims the problem file or directory at `path` (registered ones
    first, then the built-in ones), by its content; None when none does."""
    p = Path(path)
    for name in [*[n for n in _registered if n not in BUILTIN], *BUILTIN]:
        d = get_domain(name)
        if d.claims(p):
            return d
    return None


def load_problem(path: str | Path) -> Problem:
    """Load a problem file with the first domain that claims it (`claimant`).

    Raises:
        ProblemError: the path does not exist, no domain claims it, or the domain rejects it.
    """
    p = Path(path)
    if not p.exists():
        raise ProblemError(f"problem file not found: {p}")
    d = claimant(p)
    if d is not None:
        return d.load_problem(p)
    raise ProblemError(f"{p}: no domain reads this kind of file (domains: {', '.join(names())}); "
                       "a PyTorch problem is a KernelBench-format .py file, a command problem a directory "
                       "with problem.toml (docs/command.md)")


def parse_problem(source: str, *, name: str, path: str | None = None, domain: str) -> Problem:
    """Check a problem's source with the domain that stored it."""
    return get_domain(domain).parse_problem(source, name=name, path=path)


def section_settings(cfg: EvaluationConfig, name: str) -> BaseModel | None:
    """The domain `name`'s own config section (`[<name>]`, `EvaluationConfig.domains`),
    validated by its `Domain.settings` model; None for a domain that takes no settings.

    Raises:
        ConfigError: an unknown domain; an unknown key or invalid value (naming `<name>.KEY`,
            and the option that sets it); or a section for a domain without settings.
    """
    from pydantic import ValidationError

    from stratagem.config import DOMAIN_OPTIONS, describe_errors

    model = get_domain(name).settings
    raw = cfg.domains.get(name) or {}
    if model is None:
        if raw:
            raise ConfigError("; ".join(_no_setting(name, key) for key in _keys(raw)))
        return None
    lacking = [k for k in _keys(raw) if k in DOMAIN_OPTIONS and k.split(".")[0] not in model.model_fields]
    if lacking:
        raise ConfigError(f"{DOMAIN_OPTIONS[lacking[0]]}: the {name} domain has no such setting ([{name}] {lacking[0]})")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(describe_errors(e, prefix=name)) from e


def check_sections(cfg: EvaluationConfig) -> None:
    """Every domain section of `cfg` names a domain and is valid for it (a section of a name
    that is neither the configuration's own nor a domain's is a misspelt one).

    Raises:
        ConfigError: naming the section, or its key and the option that sets it.
    """
    from stratagem.config import StratagemConfig

    for name in cfg.domains:
        if name not in names():
            own = ", ".join(StratagemConfig.model_fields)
            with_settings = ", ".join(n for n in names() if get_domain(n).settings is not None) or "none"
            raise ConfigError(f"[{name}]: unknown section (check its spelling): the configuration's own are {own}, "
                              f"the domains' {with_settings}")
        section_settings(cfg, name)


def _keys(section: Mapping[str, Any], prefix: str = "") -> list[str]:
    return [k for key, v in section.items()
            for k in (_keys(v, f"{prefix}{key}.") if isinstance(v, Mapping) and v else [f"{prefix}{key}"])]


def _no_setting(name: str, key: str) -> str:
    from stratagem.config import DOMAIN_OPTIONS

    option = DOMAIN_OPTIONS.get(key)
    said = option or f"{name}.{key}"
    return f"{said}: the {name} domain has no such setting (it takes no settings of its own; [{name}] {key})"
