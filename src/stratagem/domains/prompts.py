"""Owns reading a domain's prompt templates kept as package data: `PackagePrompts` (the
`Domain.prompts` of the built-in domains), one Markdown file per template in a package's folder,
read when asked (never at import; `context/render.py` caches what it parses)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from stratagem.core.problem import Problem


@dataclass(frozen=True)
class PackagePrompts:
    """A domain's prompts: the `<name>.md` files of `package`, and its offline design."""

    package: str
    """The package (a folder of the wheel) whose `<name>.md` files are the templates."""
    offline: Callable[[Problem], str]
    """The design the model-free `test` model answers with (`Prompts.offline_design`)."""

    def template(self, name: str) -> str:
        """The text of template `name`.

        Raises:
            FileNotFoundError: the domain has no such template.
        """
        return (resources.files(self.package) / f"{name}.md").read_text("utf-8")

    def offline_design(self, problem: Problem) -> str:
        return self.offline(problem)
