"""A third domain, written only in this folder: speed up a pure-Python function `f(n)`.

A problem is a `.toy.py` file defining `f` and `N`; a design is a `candidate.py` defining a
faster `f`. `syntax` runs in the parent; `check` (the design's f(N) equals the reference's) and
`timing` (the two alternated in blocks, paired) run in the real sandbox, in this folder's worker
module (`toy_worker.py`). It subclasses `Domain` with the core alone: no optional capability,
and nothing in the generic layers knows it exists.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig
from stratagem.core.design import Design
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.objective import Objective
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult
from stratagem.domains.base import BaselineNames, Domain, Task, WorkerSpec
from stratagem.domains.views import describe_timing
from stratagem.errors import ProblemError
from stratagem.worker_api.protocol import EvalRequest, SourceFile

GRAPH = (ValidatorSpec("syntax", (), "parent"), ValidatorSpec("check", ("syntax",), "worker"),
         ValidatorSpec("timing", ("check",), "worker"))


NAME = "toy"
MAIN_FILE = "candidate.py"
"""A design's one file (it defines a faster `f`)."""
WORKER = WorkerSpec("toy_worker", keep_env=("TOY_*",), caches={"TOY_CACHE_DIR": "toy"})


class _Prompts:
    def template(self, name: str) -> str:
        return ""

    def offline_design(self, problem: Problem) -> str:
        return problem.source


def syntax(source: str) -> ValidatorResult:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return ValidatorResult("syntax", "failed", f"line {e.lineno}: {e.msg}", "compile_error")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return ValidatorResult("syntax", "failed", "defines no f(n)", "compile_error")
    return ValidatorResult("syntax", "passed")


class ToyTask(Task):
    def validator_graph(self) -> ValidatorGraph:
        return ValidatorGraph.of(GRAPH)

    def run_parent_validator(self, name: str, design: Design, earlier: Mapping[str, ValidatorResult],
                             peaks: Mapping[str, Any] | None, device: str) -> ValidatorResult:
        return syntax(design.files[MAIN_FILE])

    def build_request(self, design: Design | None, stages: Sequence[ValidatorSpec], baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Any] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        return EvalRequest(request_id=uuid.uuid4().hex, domain=self.problem.domain, device="cpu", **WORKER.fields(stages),
                           problem=SourceFile(name=self.problem.name, source=self.problem.source),
                           files=dict(design.files) if design else {})

    def timeout_s(self, override: float | None = None, reference_ms: float | None = None) -> float:
        return override or 120.0

    def precheck(self, device: str) -> Callable[[str], ValidatorResult]:
        return syntax


class ToyDomain(Domain):
    name = NAME
    objective = Objective("runtime", "ms", "minimize")
    names = BaselineNames()
    worker = WORKER
    """Not under `stratagem.domains`: the worker entry point imports what the request names (the
    sandbox's PYTHONPATH carries this folder); it keeps `TOY_*` and a cache per slot."""

    def claims(self, path: Path) -> bool:
        return str(path).endswith(".toy.py")

    def load_problem(self, path: str | Path) -> Problem:
        p = Path(path)
        return self.parse_problem(p.read_text(), name=p.name.removesuffix(".toy.py"), path=str(p))

    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem:
        tree = ast.parse(source)
        sizes = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
        if "N" not in sizes or syntax(source).outcome != "passed":
            raise ProblemError(f"{path or name}: a toy problem defines f(n) and N")
        return Problem(name=name, domain=self.name, source=source, path=path, size_constants=sizes)

    def open(self, problem: Problem, cfg: EvaluationConfig) -> ToyTask:
        return ToyTask(problem, cfg)

    def describe(self, name: str, details: Mapping[str, Any]) -> str | None:
        return describe_timing(details, self.names.reference) if name == "timing" else None

    @property
    def prompts(self) -> _Prompts:
        return _Prompts()

    def main_file(self, problem: Problem) -> str:
        return MAIN_FILE

    def reference_design(self, reference_source: str, why: str) -> str:
        return f"# the reference itself: {why}\n" + reference_source


DOMAIN = ToyDomain()
