"""Owns the command domain's parent side: `CommandDomain` (the Domain protocol for problems
that are directories with `problem.toml`): its validator graph, the hidden inputs drawn per
evaluation (a secret seed and sizes from the declared ranges), the worker payload and request,
the run limits, the typed measurement and the rules the agents are told.

Graph: `static_checks` (parent: the design's files are editable ones, no forbidden source or
link line) -> `build` -> `correctness` -> `timing` (worker: `domains/command/worker.py`); the red-team audit's graph
`BREACH_GRAPH`."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stratagem.config import EvaluationConfig
from stratagem.core.design import Design, files_text, text_files, with_header
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.objective import Objective
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult
from stratagem.domains.base import BaselineNames, Domain, Task, WorkerSpec
from stratagem.domains.command import problem as problems
from stratagem.domains.command.forbid import link_findings, source_findings
from stratagem.domains.command.spec import RETIMES, SizeRange, Spec
from stratagem.domains.views import describe_correctness, describe_timing
from stratagem.worker_api.protocol import EvalRequest, SourceFile

NAME = "command"

GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("static_checks", (), "parent"),
    ValidatorSpec("build", ("static_checks",), "worker"),
    ValidatorSpec("correctness", ("build",), "worker"),
    ValidatorSpec("timing", ("correctness",), "worker"),
)

BREACH_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("build", (), "worker"),
    ValidatorSpec("breach_audit", ("build",), "worker"),
)
"""The red-team audit of a design the harness accepted (`audit.py`): both programs built afresh,
then checks stronger than the harness's (the reference's files watched while the design runs,
fresh seeds, fresh directories and HOME, the wall clock against the reported time). A failed
stage is a breach."""

GRAPHS: dict[str, tuple[ValidatorSpec, ...]] = {"check": GRAPH[:3], "breach": BREACH_GRAPH}
"""The writers' `check` tool: build and a run on the hidden inputs against the reference, no
timing (no `profile`: the domain has no profiler); `breach`, the red-team audit."""

STAGE_RULES: dict[str, str] = {
    "static_checks": "stage `static_checks`: the design holds only editable files; no forbidden source "
                     "pattern, no forbidden library on a link line",
    "build": "stage `build`: the reference and the design are built by the build command in separate "
             "directories; the fixed files are copied in after the design's and their hashes checked after the "
             "build (a design may not change them); every binary the build makes is checked for forbidden "
             "libraries (direct and transitive), symbols and dlopen",
    "correctness": "stage `correctness`: the reference and the design run on the same hidden inputs (a secret "
                   "seed and sizes drawn per evaluation from the declared ranges: hard-coded answers fail) and "
                   "their outputs are compared",
    "timing": "stage `timing`: reference and design run alternately in blocks on one hidden input (the paired "
              "ratio and its 95% interval); each reported time must fit inside the wall time the harness "
              "measured around its run, and the time a run spends outside its reported time may not exceed "
              "the reference's by more than the declared slack; timed outputs are compared too",
}

RUN_LIMIT_MAX_S = 3600.0
WORKER = WorkerSpec("stratagem.domains.command.worker", compile_stage="build")


def spec_of(problem: Problem) -> Spec:
    return problems.bundle_of(problem.source, problem.path or problem.name).spec


def draw_size(size: SizeRange, rng: secrets.SystemRandom) -> int:
    lo = -(-size.low // size.multiple_of)
    return rng.randint(lo, size.high // size.multiple_of) * size.multiple_of


def draw_inputs(spec: Spec, rng: secrets.SystemRandom | None = None) -> dict[str, Any]:
    """One hidden input: a secret seed and every size drawn from its range."""
    r = rng or secrets.SystemRandom()
    return {"seed": r.randrange(1, 2**31), "sizes": {s.name: draw_size(s, r) for s in spec.sizes}}


class Payload(BaseModel):
    """What the command worker needs besides the envelope (`EvalRequest.payload`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trials: list[dict[str, Any]] = Field(default_factory=list)
    """Hidden inputs of the correctness trials: `seed` and `sizes` each, drawn by the parent."""
    timing_input: dict[str, Any]
    """The input every timed run uses (reference and design alike): a secret seed and the
    problem's declared timing sizes (`TimingSpec.sizes`)."""
    reference_expect_ms: float | None = None
    """The reference's median earlier in this invocation (the reference-drift check)."""


def agent_rules(spec: Spec) -> tuple[str, ...]:
    cmp = spec.compare
    how = {"json": f"the numbers under the key {cmp.key!r} of a JSON line on stdout",
           "file": f"the numbers in the output file {cmp.file}", "check": "the problem's check command"}[cmp.mode]
    tol = f" within atol={cmp.atol:g} + rtol={cmp.rtol:g} x |reference|" if cmp.mode != "check" else ""
    rules = [
        f"files: a design is a set of the editable files ({', '.join(spec.editable)}); the fixed files "
        f"({', '.join(spec.fixed) or 'none'}) belong to the harness",
        f"commands: build `{spec.build.command}` ({spec.build.timeout_s:g} s), run `{spec.run.command}` "
        f"({spec.run.timeout_s:g} s)" + (f", check `{spec.check.command}`" if spec.check else ""),
        f"correctness: {how}{tol}, against the reference's on the same hidden inputs, over {spec.trials} trials",
        f"objective: the run's time, read from {spec.objective.source} ({spec.objective.unit}), lower is better"
        + (f"; per case ({', '.join(spec.objective.cases)}): each case timed paired on its own, the figure is the "
           "geometric mean of the cases' speedups" if spec.objective.cases else ""),
    ]
    if spec.baselines:
        rules.append("baselines timed beside every design, for comparison only (they may use what a design may "
                     f"not): {', '.join(b.label for b in spec.baselines)}; each design reports its fraction of "
                     "their speed per case")
    if spec.requires_gpu:
        rules.append("device: the problem needs a GPU; on a CPU-only evaluation the design is built, then needs_gpu")
    if spec.work.declared:
        rules.append("floor: a median time under the declared work at the declared peak rates "
                     f"(flops {spec.work.flops or '-'} at {spec.work.peak_gflops or '-'} GFLOP/s, bytes "
                     f"{spec.work.bytes or '-'} at {spec.work.peak_gbps or '-'} GB/s) is rejected as impossible")
    fb = spec.forbid
    if fb.libraries or fb.symbols or fb.sources or not fb.allow_dlopen:
        rules.append("forbidden: " + "; ".join(x for x in (
            f"libraries {', '.join(fb.libraries)}" if fb.libraries else "",
            f"symbols {', '.join(fb.symbols)}" if fb.symbols else "",
            f"source patterns {', '.join(fb.sources)}" if fb.sources else "",
            "dlopen" if not fb.allow_dlopen else "") if x))
    return (*rules, *(STAGE_RULES[s.name] for s in GRAPH))


def static_checks(spec: Spec, files: Mapping[str, str]) -> ValidatorResult:
    """The design's files against the problem's rules, before anything runs."""
    if not files:
        return ValidatorResult("static_checks", "failed", "the design holds no files", "malformed")
    unknown = sorted(set(files) - set(spec.editable))
    if unknown:
        return ValidatorResult("static_checks", "failed", f"the design has files the problem does not let it "
                               f"change: {unknown} (editable: {list(spec.editable)})", "rejected",
                               {"unknown_files": unknown})
    findings = source_findings(files, spec.forbid) + link_findings(spec.build.command, spec.forbid, "the build command")
    if findings:
        return ValidatorResult("static_checks", "failed", findings[0], "rejected", {"findings": findings})
    return ValidatorResult("static_checks", "passed", details={"files": sorted(files)})


class CommandTask(Task):
    """A command problem under one configuration (`Domain.open`): its spec parsed once."""

    def __init__(self, problem: Problem, cfg: EvaluationConfig) -> None:
        super().__init__(problem, cfg)
        self.bundle = problems.bundle_of(problem.source, problem.path or problem.name)
        self.spec: Spec = self.bundle.spec

    def validator_graph(self) -> ValidatorGraph:
        return ValidatorGraph.of(GRAPH)

    def run_parent_validator(self, name: str, design: Design, earlier: Mapping[str, ValidatorResult],
                             peaks: Mapping[str, Any] | None, device: str) -> ValidatorResult:
        if name == "static_checks":
            return static_checks(self.spec, design.files)
        raise KeyError(f"no parent validator {name!r}")

    def build_request(self, design: Design | None, stages: Sequence[ValidatorSpec], baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Mapping[str, str]] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        spec, rng = self.spec, secrets.SystemRandom()
        trials = [draw_inputs(spec, rng) for _ in range(spec.trials)]
        if seeds is not None:  # a caller's seeds replace the drawn ones (sizes stay drawn)
            trials = [{**t, "seed": int(s)} for t, s in zip(trials, seeds, strict=False)]
        # timed at the problem's declared sizes (fixed: two evaluations time the same work); the seed is secret
        timing_input = {"seed": rng.randrange(1, 2**31), "sizes": dict(spec.timing.sizes)}
        payload = Payload(trials=trials, timing_input=timing_input)
        return EvalRequest(
            request_id=uuid.uuid4().hex, domain=NAME, **WORKER.fields(stages),
            problem=SourceFile(name=self.problem.name, source=self.problem.source),
            files=dict(design.files) if design is not None else {},
            device="cpu", judge=False,
            payload=payload.model_dump(),
        )

    def with_reference_expectation(self, req: EvalRequest, value: float | None) -> EvalRequest:
        payload = Payload.model_validate({**req.payload, "reference_expect_ms": value})
        return req.model_copy(update={"payload": payload.model_dump()})

    def request_seeds(self, req: EvalRequest) -> tuple[int, ...]:
        p = req.payload
        draws = [*(p.get("trials") or ()), p.get("timing_input") or {}]
        return tuple(int(d["seed"]) for d in draws if "seed" in d)

    def timeout_s(self, override: float | None = None, reference_ms: float | None = None) -> float:
        """The user's limit, the problem's `timeout_s`, else the sum of every command's own
        limit over the runs an evaluation makes (at least `[evaluation] timeout_s`)."""
        spec = self.spec
        if override is not None:
            return override
        if spec.timeout_s is not None:
            return spec.timeout_s
        t, attempts, programs = spec.timing, 1 + RETIMES, 2 + len(spec.baselines)
        runs = 2 * spec.trials + 1 + programs * t.warmup + programs * t.pairs * t.runs * attempts
        checks = (spec.trials + t.pairs * t.runs * attempts) * spec.check.timeout_s if spec.check is not None else 0.0
        return min(RUN_LIMIT_MAX_S, max(self.cfg.timeout_s, runs * spec.run.timeout_s + checks))

    def compile_timeout_s(self, override: float | None = None) -> float | None:
        """Two builds (the reference's and the design's), each under its own limit."""
        return max(self.cfg.compile_timeout_s, (2 + len(self.spec.baselines)) * self.spec.build.timeout_s + 30.0)

    def precheck(self, device: str) -> Callable[[str], ValidatorResult]:
        spec = self.spec
        return lambda source: static_checks(spec, text_files(source, spec.editable[0]))

    def agent_facts(self) -> dict[str, Any]:
        # the prompts' `$fact_NAME` values
        from stratagem.domains.command.prompts import prompt_facts

        spec, b = self.spec, self.bundle
        return {"rules": agent_rules(spec), "editable": list(spec.editable), "fixed": list(spec.fixed),
                "background": spec.description, "hints": list(spec.hints), "docs": sorted(b.docs()),
                **prompt_facts(spec, b)}


class CommandDomain(Domain):
    """The command domain behind the `Domain` seam (`domains/base.py`): the core, the writers'
    `check` tool and the reference as written (`written_reference`); no baselines beyond the
    reference (timed beside each design), no peaks, judge, prebuild or export footer."""

    name = NAME
    objective = Objective("runtime", "ms", "minimize")
    names = BaselineNames()
    worker = WORKER
    graphs = GRAPHS
    written_reference = staticmethod(problems.written_reference)

    def reference_design(self, reference_source: str, why: str) -> str:
        """The reference's editable files, the first that takes a comment headed by `why`."""
        files = dict(problems.bundle_of(reference_source).reference_files())
        lines = [f"stratagem: the reference's editable files, not a design: {why}."]
        for name in files:
            if (headed := with_header(name, files[name], lines)) is not None:
                files[name] = headed
                break
        return files_text(files)

    def claims(self, path: Path) -> bool:
        return problems.claims(path)

    def load_problem(self, path: str | Path) -> Problem:
        return problems.load_problem(path)

    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem:
        return problems.parse_problem(source, name=name, path=path)

    def open(self, problem: Problem, cfg: EvaluationConfig) -> CommandTask:
        return CommandTask(problem, cfg)

    def describe(self, name: str, details: Mapping[str, Any]) -> str | None:
        if name == "correctness":
            return describe_correctness(details)
        return describe_timing(details, self.names.reference) if name == "timing" else None

    def main_file(self, problem: Problem) -> str:
        return spec_of(problem).editable[0]

    def documentation(self, problem: Problem) -> dict[str, str]:
        """The files of the problem's `docs` folder, as its bundle holds them (a command problem's
        path is its folder: no `docs/` beside it is the problem's)."""
        return problems.bundle_of(problem.source, problem.path or problem.name).docs()

    @property
    def prompts(self):  # -> domains.prompts.PackagePrompts (imported on first use)
        """The command domain's prompt templates and offline design (`domains/command/prompts/`)."""
        from stratagem.domains.command.prompts import PROMPTS

        return PROMPTS


DOMAIN = CommandDomain()
"""The instance the registry (`domains/__init__.py`) hands out for `command` problems."""
