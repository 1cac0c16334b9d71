"""Owns a configuration mapping's keys before it is validated (`config.py` validates it):
merging a file, a stored configuration and command-line overrides (`merge`, `drop_none`); the
keys that left `[evaluation]` for a domain's own section (`MOVED_KEYS`), moved on read with a
deprecation warning at the key's line of a file; and the messages that name an invalid key with
the option that sets it (`describe_errors`). Standard library and pydantic only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

MOVED_KEYS: dict[str, tuple[str, ...]] = {
    "pytorch": ("correctness_trials", "correctness", "tolerances", "baselines", "integrity", "roofline_margin",
                "gpu_memory_fraction", "timing"),
}
"""Keys that left `[evaluation]` for a domain's own section: domain -> keys. Older config files
(and stored runs' configs) still carry them in `[evaluation]`; they are moved to the domain's
section, a file's with a deprecation message naming the key and its new place."""


class ConfigDeprecationWarning(FutureWarning):
    """A config file uses a key at its old place (shown to users by default)."""


def move_keys(ev: Mapping[str, Any]) -> dict[str, Any]:
    """`[evaluation]` with the keys of `MOVED_KEYS` moved into `domains.<domain>` (a value set
    at both places is an error naming both)."""
    out = dict(ev)
    domains = {k: dict(v) for k, v in dict(out.get("domains") or {}).items()}
    for domain, keys in MOVED_KEYS.items():
        for key in keys:
            if key not in out:
                continue
            value = out.pop(key)
            section = domains.setdefault(domain, {})
            if key in section and section[key] != value:
                raise ValueError(f"evaluation.{key} (deprecated) and {domain}.{key} are both set and differ: "
                                 f"keep only [{domain}] {key}")
            section[key] = value.model_dump() if isinstance(value, BaseModel) else value
    if domains:
        out["domains"] = domains
    return out


def moved_in(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The deprecated keys a config mapping still has in `[evaluation]`, each with a sentence
    saying its new place."""
    ev = data.get("evaluation")
    if not isinstance(ev, Mapping):
        return []
    return [(key, f"[evaluation] {key} is deprecated: it is now [{domain}] {key} (applied from there; move it)")
            for domain, keys in MOVED_KEYS.items() for key in keys if key in ev]


def line_of(text: str, key: str) -> int:
    """The line of a TOML text where `[evaluation]`'s `key` is set (`key = ...` after the
    section's header, or its own `[evaluation.key]` table); 1 when not found."""
    lines = text.splitlines()
    table = re.compile(rf"^\s*\[\s*evaluation\s*\.\s*{re.escape(key)}\s*[\].]")
    assign = re.compile(rf"^\s*{re.escape(key)}\s*=")
    header = re.compile(r"^\s*\[")
    inside = False
    for n, line in enumerate(lines, 1):
        if table.match(line):
            return n
        if header.match(line):
            inside = re.match(r"^\s*\[\s*evaluation\s*\]", line) is not None
        elif inside and assign.match(line):
            return n
    return 1


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s values, nested mappings merged key by key (`over` wins)."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def merge_moved(name: str, old: Mapping[str, Any], new: Mapping[str, Any], strict: bool = True) -> dict[str, Any]:
    """A domain's section `[name]` (`new`) merged over its keys at their deprecated place in
    `[evaluation]` (`old`); with `strict`, a key set at both places differently is an error."""
    both = sorted(k for k in old if k in new and old[k] != new[k])
    if strict and both:
        raise ValueError(f"{name}.{both[0]} is set both in [{name}] and at its deprecated place "
                         f"[evaluation] {both[0]}, differently: keep only [{name}] {both[0]}")
    return merge(dict(old), new)


OPTIONS = {
    "evaluation.device": "--device", "evaluation.timeout_s": "--timeout", "search.policy": "--policy",
    "search.iterations": "--iterations", "search.patience": "--patience", "search.implementors": "--implementors",
    "search.max_queries": "--max-queries", "search.max_tokens": "--max-tokens", "search.max_usd": "--max-usd",
    "search.max_gpu_seconds": "--max-gpu-seconds", "search.max_wall_seconds": "--max-wall-seconds",
    "search.run_dir": "--run-dir", "agents.model": "--model", "agents.endpoints": "--endpoint",
    "evaluation.queue_wait_s": "--queue-wait",
}
"""Config keys set by a command-line option: errors name both."""

DOMAIN_OPTIONS = {"integrity": "--integrity", "correctness.mode": "--correctness"}
"""Keys of the problem's domain's own section that a command-line option sets (`[<domain>]`:
`cli/common.domain_over`): errors name both."""


def describe_errors(e: ValidationError, path: str | Path | None = None, prefix: str | None = None) -> str:
    """One line per invalid value, naming its config key (under `prefix`, a section's name,
    when `e` comes from validating that section alone), the option that sets it, what was
    given and what is allowed (never pydantic's raw dump)."""
    lines = []
    for err in e.errors():
        loc = [str(x) for x in err.get("loc", ()) if not str(x).startswith("function-")]
        in_domain = prefix is not None or loc[:2] == ["evaluation", "domains"]
        if loc[:2] == ["evaluation", "domains"]:
            loc = loc[2:]  # `pytorch.KEY`, as the file spells it
        loc = [prefix, *loc] if prefix else loc
        key = ".".join(loc) or "configuration"
        opt = DOMAIN_OPTIONS.get(".".join(loc[1:])) if in_domain else OPTIONS.get(key)
        name = f"{key} ({opt})" if opt else key
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        given = err.get("input")
        shown = "" if err.get("type") in ("extra_forbidden", "missing") or isinstance(given, dict) or repr(given) in msg \
            else f" (got {given!r})"
        if err.get("type") == "extra_forbidden":
            msg = "unknown setting (check its spelling and section)"
        lines.append(f"{name}: {msg}{shown}")
    where = f" in {path}" if path else ""
    return f"invalid configuration{where}: " + "; ".join(lines)


def drop_none(m: Mapping[str, Any]) -> dict[str, Any]:
    """`m` without its None values, nor the mappings left empty by that (unset options)."""
    out: dict[str, Any] = {}
    for k, v in m.items():
        if isinstance(v, Mapping):
            inner = drop_none(v)
            if inner:
                out[k] = inner
        elif v is not None:
            out[k] = v
    return out
