"""Owns the agents' prompt templates as data: each template split into named `string.Template`
sections (`<!-- section: NAME -->` lines), the domain's (`Domain.prompts`) or this package's
domain-free ones (`context/prompts/`), read on first use and cached, and filled by name.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from string import Template

from stratagem.domains import get_domain

ROLES = ("strategist", "analyst", "implementor", "implementor_feedback", "review", "summarizer")
"""One template file per role (plus `design`, the block every design is shown in, and `pike`)."""

GENERIC = frozenset({"summarizer", "budget", "evidence"})
"""Templates that name no domain's concepts: this package's own (`context/prompts/`)."""

SHORT_ID_CHARS = 12
"""Design ids are shown by their first characters; agents may cite any unique prefix."""

_SECTION = re.compile(r"^<!-- section: ([a-z_]+) -->[ \t]*$", re.MULTILINE)


def short_id(design_id: str) -> str:
    return design_id[:SHORT_ID_CHARS]


@functools.cache
def sections(name: str, domain: str | None) -> dict[str, Template]:
    """The named sections of template `name`: the domain's (`Domain.prompts`), or this package's
    own for the domain-free ones (`GENERIC`, whose callers say `domain=None`); read once, then
    cached."""
    if name in GENERIC:
        text = (resources.files("stratagem.context") / "prompts" / f"{name}.md").read_text("utf-8")
    elif domain is None:
        raise ValueError(f"the {name} template is a domain's: name the domain")
    else:
        text = get_domain(domain).prompts.template(name)
    parts = _SECTION.split(text)
    out: dict[str, Template] = {}
    for i in range(1, len(parts) - 1, 2):
        out[parts[i]] = Template(parts[i + 1].strip("\n"))
    return out


def fill(name: str, section: str, *, domain: str | None, **values: object) -> str:
    """Fill one section of one template of `domain`; a missing value is a bug and raises KeyError."""
    return sections(name, domain)[section].substitute({k: str(v) for k, v in values.items()}).strip()


def has(name: str, section: str, domain: str) -> bool:
    """Whether the domain's template `name` has `section` (the optional ones)."""
    return section in sections(name, domain)


def reference_word(domain: str) -> str:
    """What a design is timed against, as the views name it (`design.md`'s `reference`)."""
    return fill("design", "reference", domain=domain)
