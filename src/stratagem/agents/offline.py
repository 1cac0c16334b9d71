"""Owns the `test` model: scripted pydantic-ai `TestModel`s per role that drive a whole `auto`
run offline (no network, no key), for `stratagem run --model test` and smoke tests.

The Strategist always plans `innovate`; the Implementor answers with the reference program
renamed to `ModelNew` (valid, about as fast as eager); the review finds no cheating; the Analyst
and Summarizer answer with TestModel's canned text. No tool is called.
"""

from __future__ import annotations

import ast

from pydantic_ai.models.test import TestModel

from stratagem.agents.models import ModelPool, RoleModels
from stratagem.core import pysyntax
from stratagem.core.problem import Problem

_DROP = frozenset({"get_inputs", "get_init_inputs"})


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            node.id = "ModelNew"
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == "Model":
            node.name = "ModelNew"
        self.generic_visit(node)
        return node


def echo_candidate(problem_source: str) -> str:
    """The reference program as a candidate: `Model` renamed `ModelNew`, input makers dropped."""
    try:
        tree = pysyntax.parse(problem_source)
    except SyntaxError:
        return "class ModelNew:\n    pass\n"
    tree.body = [
        s for s in tree.body
        if not (isinstance(s, ast.FunctionDef) and s.name in _DROP)
    ]
    return ast.unparse(_Rename().visit(tree)) + "\n"


def offline_models(problem: Problem) -> RoleModels:
    """Per-role TestModels whose structured answers are usable by the `auto` policy."""

    def pool(**kw: object) -> ModelPool:
        return ModelPool([TestModel(call_tools=[], **kw)], labels=["test"])  # type: ignore[arg-type]

    plan = {
        "strategy": "innovate",
        "evidence": [],
        "rationale": "offline test model",
        "instructions": "offline test model: rewrite the reference as ModelNew",
    }
    candidate = {"source": echo_candidate(problem.source), "notes": "offline test model"}
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
    code query with the reference renamed `ModelNew` in a ```python block."""
    code = f"```python\n{echo_candidate(problem.source)}```\n"

    def pool(text: str) -> ModelPool:
        return ModelPool([TestModel(call_tools=[], custom_output_text=text)], labels=["test"])

    return RoleModels(default=pool(code), by_role={
        "brainstorm": pool("- fuse the elementwise operators\n- run under inference mode\n"),
    })
