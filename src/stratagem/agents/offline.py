"""Owns the `test` model: scripted pydantic-ai `TestModel`s per role that drive a whole `auto`
or PIKE run offline (no network, no key), for `stratagem run --model test` and smoke tests.

The Strategist always plans `innovate`; the Implementor answers with the domain's offline design
(`Domain.prompts.offline_design`: the reference restated as a valid design, about as fast as
the reference); the review finds no cheating; the Analyst and Summarizer answer with TestModel's
canned text. No tool is called.
"""

from __future__ import annotations

from pydantic_ai.models.test import TestModel

from stratagem.agents.models import ModelPool, RoleModels
from stratagem.core.problem import Problem
from stratagem.domains import get_domain


def offline_models(problem: Problem) -> RoleModels:
    """Per-role TestModels whose structured answers are usable by the `auto` policy."""

    def pool(**kw: object) -> ModelPool:
        return ModelPool([TestModel(call_tools=[], **kw)], labels=["test"])  # type: ignore[arg-type]

    plan = {
        "strategy": "innovate",
        "evidence": [],
        "rationale": "offline test model",
        "instructions": "offline test model: restate the reference as a design",
    }
    candidate = {"source": get_domain(problem.domain).prompts.offline_design(problem), "notes": "offline test model"}
    review = {"cheating": False, "reason": "offline test model"}
    return RoleModels(
        default=pool(),
        by_role={
            "strategist": pool(custom_output_args=plan),
            "implementor": pool(custom_output_args=candidate),
            "review": pool(custom_output_args=review),
        },
    )


def offline_pike_models(problem: Problem) -> RoleModels:
    """TestModels for the PIKE policies: the brainstorm answers with two bullet ideas, every
    code query with the offline design in a code block."""
    code = f"```\n{get_domain(problem.domain).prompts.offline_design(problem)}```\n"

    def pool(text: str) -> ModelPool:
        return ModelPool([TestModel(call_tools=[], custom_output_text=text)], labels=["test"])

    return RoleModels(default=pool(code), by_role={
        "brainstorm": pool("- fuse the work into fewer passes over the data\n- reduce the memory traffic\n"),
    })
