"""Owns the attacker's prompts (the domain's `redteam` template; its system prompt is
`context/pike.py`'s `instructions("attack")`): the catalog
of shortcut classes that have fooled kernel benchmarks with what catches each here today, and
the request for one attempt, which states the problem and the rules exactly as the writers get
them (`context/pike.py`'s problem statement) and lists the attacker's earlier attempts with
what happened to each, so no caught attempt is asked for twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from stratagem.context import pike
from stratagem.context.render import ProblemBrief, fill, has

_CLASS = re.compile(r"^- `([a-z0-9_]+)`: (.+?)(?=^- `|\Z)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Attempt:
    """One earlier attempt as the attacker is told it."""

    id: str
    exploit: str
    declared: str
    """Which check the attacker said should catch it."""
    outcome: str
    """What happened: caught by which check, a breach, honest, broken."""


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


def attack(brief: ProblemBrief, attempts: Sequence[Attempt], focus: tuple[str, str] | None = None) -> str:
    """The request for one attempt: the problem and rules, the catalog, the earlier attempts,
    and (when given) the class this attempt should try."""
    d = brief.domain
    common = pike.common(brief)
    lines = [fill("redteam", "attempt", domain=d, id=a.id[:10] or "-", exploit=a.exploit, declared=a.declared,
                  outcome=a.outcome) for a in attempts]
    what = focus[1].split(". ")[0] if focus else ""
    return fill("redteam", "attack", domain=d, problem_statement=common["problem_statement"],
                problem_name=common["problem_name"], problem_source=common["problem_source"],
                classes=fill("redteam", "classes", domain=d),
                attempts="\n".join(lines) or fill("redteam", "none_yet", domain=d),
                focus=(" " + fill("redteam", "focus", domain=d, cls=focus[0], what=what)) if focus else "")
