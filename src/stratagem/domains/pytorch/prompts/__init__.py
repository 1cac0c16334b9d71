"""Owns the PyTorch domain's prompt templates (the `*.md` files of this folder, package data:
one per role, `pike` and `design`; `context/render.py` fills them) and its offline design: the
reference program as a candidate, `Model` renamed `ModelNew` and the input makers dropped."""

from __future__ import annotations

import ast

from stratagem.core import pysyntax
from stratagem.core.problem import Problem
from stratagem.domains.prompts import PackagePrompts

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


def offline_design(problem: Problem) -> str:
    return echo_candidate(problem.source)


PROMPTS = PackagePrompts(__name__, offline_design)
"""The PyTorch domain's `Domain.prompts`."""
