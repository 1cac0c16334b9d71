"""Owns the attacker's prompts (the domain's `redteam` template; its system prompt is
`context/pike.py`'s `instructions("attack")`): the catalog of shortcut classes that have fooled
kernel benchmarks with what catches each here today, and the request for one attempt, which
states the problem and the rules exactly as the writers get them (`context/pike.py`'s problem
statement), lists every earlier attempt with what happened to it in full, and gives the
attempt a direction of its own (`Direction`: the untried classes, and the one this slot starts
from, distinct from the other slots written at once); the attacker chooses its class.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from stratagem.context import pike
from stratagem.context.render import ProblemBrief, fill, has

_CLASS = re.compile(r"^- `([a-z0-9_]+)`: (.+?)(?=^- `|\Z)", re.MULTILINE | re.DOTALL)
HONEST = "none"
"""The class an attempt declares when it believes itself honest."""


@dataclass(frozen=True)
class Attempt:
    """One earlier attempt as the attacker is told it."""

    id: str
    exploit: str
    cls: str
    """The catalog's class it belongs to (`class_of`), or its own name for a new class."""
    declared: str
    """Which check the attacker said should catch it."""
    outcome: str
    """What happened, in full: caught by which check, its speed, whether its shortcut fired."""


@dataclass(frozen=True)
class Direction:
    """Where one attempt of several written at once starts: slot `slot` of `of`, the classes
    no attempt tried (`untried`), and the class this slot starts from with why (`how`: empty
    for an untried one, else how its attempts came closest); `start` None: a class the
    catalog lacks."""

    slot: int
    of: int
    untried: tuple[str, ...]
    start: tuple[str, str] | None
    how: str = ""


def offered(domain: str) -> bool:
    """Whether `domain` has an attacker's template."""
    try:
        return has("redteam", "attack", domain)
    except (KeyError, FileNotFoundError, OSError):
        return False


def classes(domain: str) -> list[tuple[str, str]]:
    """The catalog's classes: (name, what it is and what catches it)."""
    text = fill("redteam", "classes", domain=domain)
    return [(m.group(1), " ".join(m.group(2).split())) for m in _CLASS.finditer(text)]


def class_of(exploit: str, names: Sequence[str]) -> str:
    """The catalog class an attempt's `exploit:` names (the class, or the class then a variant:
    `stale_output_by_fingerprint`), `none` for one declared honest, else the name itself (a
    class the catalog lacks)."""
    for name in sorted([*names, HONEST], key=len, reverse=True):
        if exploit == name or exploit.startswith(name + "_"):
            return name
    return exploit


def _direction(d: Direction, domain: str) -> str:
    common = {"domain": domain, "slot": d.slot, "of": d.of}
    if d.start is None:
        return fill("redteam", "direction_free", **common)
    cls, what = d.start[0], d.start[1].split(". ")[0]
    if not d.how:
        return fill("redteam", "direction_untried", **common, cls=cls, what=what,
                    untried=", ".join(f"`{u}`" for u in d.untried))
    return fill("redteam", "direction_closest", **common, cls=cls, how=d.how)


def attack(brief: ProblemBrief, attempts: Sequence[Attempt], direction: Direction) -> str:
    """The request for one attempt: the problem and rules, the catalog, every earlier attempt
    and what happened to it, and this attempt's direction."""
    d = brief.domain
    common = pike.common(brief)
    lines = [fill("redteam", "attempt", domain=d, id=a.id[:10] or "-", exploit=a.exploit, cls=a.cls,
                  declared=a.declared, outcome=a.outcome) for a in attempts]
    return fill("redteam", "attack", domain=d, problem_statement=common["problem_statement"],
                problem_name=common["problem_name"], problem_source=common["problem_source"],
                classes=fill("redteam", "classes", domain=d),
                attempts="\n".join(lines) or fill("redteam", "none_yet", domain=d),
                direction=_direction(direction, d))
