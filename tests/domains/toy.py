"""A toy second domain, defined only in the tests: speed up a pure-Python function `f(n)`.

A problem is a `.toy.py` file defining `f` and `N`; a design is a `candidate.py` defining a
faster `f`. Every validator runs in the parent, and the two that run code do it with a
command (a fresh `python -c` in a temporary directory), the way a domain of CUDA programs with
a build/run/check recipe would: `syntax`, `check` (the candidate's f(N) equals the
reference's), `timing` (the two alternated in blocks, paired). It implements the Domain
protocol and nothing else: no generic layer knows it exists.
"""

from __future__ import annotations

import ast
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig
from stratagem.core.design import MAIN_FILE, Design
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.objective import Measured, Objective
from stratagem.core.paired import Ratio, Stability, paired_ratio
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.errors import ProblemError
from stratagem.worker_api.protocol import EvalRequest, SourceFile, StageSpec

CHECK = """
import json, reference, candidate
n = int(__import__('sys').argv[1])
print(json.dumps({"ref": reference.f(n), "cand": candidate.f(n)}))
"""

TIME = """
import json, sys, time, reference, candidate
n, blocks, calls = (int(x) for x in sys.argv[1:4])
out = {"reference": [], "candidate": []}
for b in range(blocks):
    order = ("reference", "candidate") if b % 2 == 0 else ("candidate", "reference")
    for who in order:
        f = reference.f if who == "reference" else candidate.f
        block = []
        for _ in range(calls):
            t = time.perf_counter(); f(n); block.append((time.perf_counter() - t) * 1e3)
        out[who].append(block)
print(json.dumps(out))
"""


def _run(script: str, problem: Problem, design: Design, *args: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "reference.py").write_text(problem.source)
        for name, text in design.files.items():
            Path(d, name).write_text(text)
        p = subprocess.run([sys.executable, "-c", script, *args], cwd=d, capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
        return json.loads(p.stdout)


def _stats(samples: list[float]) -> dict[str, Any]:
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "iqr_ms": q3 - q1, "n": len(samples), "samples_ms": samples}


class ToyDomain:
    name = "toy"
    reference_label = "the reference"
    worker_module = "toy_worker"
    """Not under `stratagem.domains`: the worker entry point runs whatever module the domain
    declares (`toy_worker.py`, beside this file; its validators all run in the parent, so only
    a test that asks for a worker stage reaches it)."""
    judge_module: str | None = None
    objective = Objective("runtime", "ms", "minimize")
    peaks_version = 0
    baseline_graph: tuple[ValidatorSpec, ...] = ()
    confirm_graph: tuple[ValidatorSpec, ...] = ()
    calibrate_graph: tuple[ValidatorSpec, ...] = ()
    audit_graph: tuple[ValidatorSpec, ...] = ()
    export_footer = ""
    export_note = ""

    def reference_design(self, reference_source: str, why: str) -> str:
        return f"# the reference itself: {why}\n" + reference_source

    def calibration_problem(self) -> Problem | None:
        return None

    def prebuild_request(self, problem: Problem, design: Any, cfg: Any) -> Any:
        return None

    def claims(self, path: Path) -> bool:
        return str(path).endswith(".toy.py")

    def load_problem(self, path: str | Path) -> Problem:
        p = Path(path)
        return self.parse_problem(p.read_text(), name=p.name.removesuffix(".toy.py"), path=str(p))

    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem:
        tree = ast.parse(source)
        sizes = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
        if "N" not in sizes or not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
            raise ProblemError(f"{path or name}: a toy problem defines f(n) and N")
        return Problem(name=name, domain=self.name, source=source, path=path, size_constants=sizes)

    def validator_graph(self, problem: Problem, cfg: EvaluationConfig) -> ValidatorGraph:
        return ValidatorGraph.of((ValidatorSpec("syntax", (), "parent"), ValidatorSpec("check", ("syntax",), "parent"),
                                  ValidatorSpec("timing", ("check",), "parent")))

    def run_parent_validator(self, name: str, problem: Problem, design: Design, cfg: EvaluationConfig,
                             earlier: Mapping[str, ValidatorResult], peaks: Mapping[str, Any] | None,
                             device: str) -> ValidatorResult:
        n = str(problem.size_constants["N"])
        if name == "syntax":
            return self.precheck(problem, cfg, device)(design.source)
        try:
            if name == "check":
                got = _run(CHECK, problem, design, n)
                if got["ref"] != got["cand"]:
                    return ValidatorResult("check", "failed", f"f({n}) = {got['cand']}, expected {got['ref']}",
                                           "wrong_output", {"max_abs_err": abs(got["cand"] - got["ref"])})
                return ValidatorResult("check", "passed", details={"value": got["ref"]})
            blocks = _run(TIME, problem, design, n, "12", "5")
        except RuntimeError as e:
            return ValidatorResult(name, "failed", str(e), "runtime_error", {"traceback": str(e)})
        ratio = paired_ratio(blocks["reference"], blocks["candidate"])
        flat = [x for b in blocks["candidate"] for x in b]
        ref = [x for b in blocks["reference"] for x in b]
        return ValidatorResult("timing", "passed", details={
            "runtime": _stats(flat), "reference": _stats(ref), "speedup": ratio.to_json(),
            "stability": Stability(True).to_json(), "attempts": [{}], "pairs": len(blocks["reference"])})

    def needs_peaks(self, name: str) -> bool:
        return False

    def reference_beats_floor(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult) -> str | None:
        return None

    def demonstrated_peaks(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult,
                           peaks: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def build_request(self, problem: Problem, design: Design | None, stages: Sequence[ValidatorSpec],
                      cfg: EvaluationConfig, baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Any] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        return EvalRequest(request_id=uuid.uuid4().hex, domain=self.name, device="cpu",
                           worker_module=self.worker_module, judge_module=self.judge_module,
                           stages=[StageSpec(name=s.name) for s in stages],
                           problem=SourceFile(name=problem.name, source=problem.source),
                           files=dict(design.files) if design else {})

    def with_reference_expectation(self, req: EvalRequest, value: float | None) -> EvalRequest:
        return req

    def reference_facts(self, results: Sequence[ValidatorResult]) -> dict[str, Any] | None:
        return None

    def with_reference_facts(self, req: EvalRequest, facts: Mapping[str, Any]) -> EvalRequest:
        return req

    def apply_reference_facts(self, results: Sequence[ValidatorResult],
                              facts: Mapping[str, Any]) -> list[ValidatorResult]:
        return list(results)

    def request_seeds(self, req: EvalRequest) -> tuple[int, ...]:
        return ()

    def new_seed(self) -> int:
        return secrets.randbits(32)

    def timeout_s(self, problem: Problem, cfg: EvaluationConfig, override: float | None = None,
                  reference_ms: float | None = None) -> float:
        return override or 120.0

    def compile_timeout_s(self, problem: Problem, cfg: EvaluationConfig, override: float | None = None) -> float | None:
        return cfg.compile_timeout_s

    def baselines(self, cfg: EvaluationConfig, on_gpu: bool) -> list[str]:
        return []

    def baseline_rules(self, problem: Problem, cfg: EvaluationConfig) -> None:
        return None

    def measure(self, verdict: Verdict) -> Measured | None:
        r = verdict.result("timing")
        if r is None or r.outcome != "passed":
            return None
        d = r.details
        return Measured(d["runtime"]["median_ms"], d["reference"]["median_ms"], Ratio.from_json(d["speedup"]),
                        Stability.from_json(d["stability"]), dict(d["runtime"]), dict(d["reference"]))

    def precheck(self, problem: Problem, cfg: EvaluationConfig, device: str) -> Callable[[str], ValidatorResult]:
        def check(source: str) -> ValidatorResult:
            try:
                tree = ast.parse(source)
            except SyntaxError as e:
                return ValidatorResult("syntax", "failed", f"line {e.lineno}: {e.msg}", "compile_error")
            if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
                return ValidatorResult("syntax", "failed", "defines no f(n)", "compile_error")
            return ValidatorResult("syntax", "passed")
        return check

    def agent_facts(self, problem: Problem, cfg: EvaluationConfig) -> dict[str, Any]:
        return {}

    def main_file(self, problem: Problem) -> str:
        return MAIN_FILE

    def normal_form(self, files: Mapping[str, str]) -> str | None:
        return None  # every distinct file set is evaluated


DOMAIN = ToyDomain()
