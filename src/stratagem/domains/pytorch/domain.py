"""Owns the PyTorch domain's parent-side plan: `PyTorchDomain` (the Domain protocol), the
parent-placed validators, the limits and the worker requests.

Its parts: the validator graphs (`graphs.py`), the `[pytorch]` settings and the problem's
overrides of them (`settings.py`), the rules the agents are told (`rules.py`), the shapes
stage's variants (`shapes.py`). `static_checks` runs in the parent; the rest run in the worker.
A problem may narrow the graph with `STRATAGEM = {"validators": [...]}` and set or disable the
shape variants with `STRATAGEM = {"shapes": [{"batch_size": 8}]}` or `{"shapes": False}`.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stratagem.config import EvaluationConfig
from stratagem.core import pysyntax
from stratagem.core.design import Design
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.jsonish import mapping
from stratagem.core.objective import Objective
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult
from stratagem.domains.base import BaselineNames, Domain, DomainPolicy, Export, Task, WorkerSpec
from stratagem.domains.pytorch.baselines import BaselineModes, new_seed
from stratagem.domains.pytorch.floor import (
    PEAKS_VERSION,
    PyTorchPeaks,
    admitted_tolerance,
    roofline_result,
)
from stratagem.domains.pytorch.graphs import (
    AUDIT_GRAPH,
    BASELINE_GRAPH,
    CALIBRATE_GRAPH,
    CONFIRM_GRAPH,
    DEFAULT_GRAPH,
    PROBE_GRAPHS,
    STRICT_EXTRA,
    breach_graph,
    validator_graph,
)
from stratagem.domains.pytorch.settings import (
    PyTorchSettings,
    correctness_rule,
    correctness_trials,
    integrity_policy,
    settings,
    tolerances,
)
from stratagem.domains.pytorch.shapes import shape_variants
from stratagem.domains.pytorch.static.checks import checks_for_policy, run_static_checks
from stratagem.domains.pytorch.weights import EXPORT_NOTE, LOAD_HELPER
from stratagem.worker_api.protocol import EvalRequest, SourceFile

NAME = "pytorch"
MAIN_FILE = "candidate.py"
"""A candidate's one file (it defines `ModelNew`)."""
WORKER = WorkerSpec(
    module="stratagem.domains.pytorch.worker.stages",
    judge_module="stratagem.domains.pytorch.worker.judge",
    keep_env=("TORCH_CUDA_ARCH_LIST", "STRATAGEM_BUILD_PCH", "STRATAGEM_BUILD_HEADER_DIET", "TRITON_*",
              "TORCHINDUCTOR_*"),
    caches={"TORCH_EXTENSIONS_DIR": "torch_extensions", "TRITON_CACHE_DIR": "triton",
            "TORCHINDUCTOR_CACHE_DIR": "inductor"},
    compile_stage="load",
)
"""The worker's stages (`run_request`) and the judge (`run_judge`), run in the sandbox; the
build settings torch, Triton and Inductor read, and their compile caches per slot."""
GRAPHS: dict[str, tuple[ValidatorSpec, ...]] = {"confirm": CONFIRM_GRAPH, "audit": AUDIT_GRAPH, **PROBE_GRAPHS,
                                                "breach": breach_graph("lenient").specs}
"""The named graphs the domain offers (`Domain.graphs`)."""
__all__ = [  # re-exported: the evaluator checks the version of cached peaks; tests read the rest here
    "AUDIT_GRAPH", "BASELINE_GRAPH", "CALIBRATE_GRAPH", "CONFIRM_GRAPH", "DEFAULT_GRAPH", "PEAKS_VERSION",
    "STRICT_EXTRA", "correctness_rule", "correctness_trials", "integrity_policy", "shape_variants", "tolerances",
    "validator_graph",
]



def run_parent_validator(
    name: str,
    problem: Problem,
    design: Design,
    cfg: EvaluationConfig,
    earlier: Mapping[str, ValidatorResult],
    peaks: Mapping[str, Any] | None = None,
    device: str = "cuda",
) -> ValidatorResult:
    """Run a parent-placed validator, given the results so far, the device's peaks and the
    physical device (`cpu` or `cuda:N`: the strict policy's own-kernel rule differs)."""
    if name == "static_checks":
        kind = "cpu" if device == "cpu" else "cuda"
        path = design.provenance.get("path")  # a file the user gave: name it in the findings
        filename = str(path).replace("\\", "/").rsplit("/", 1)[-1] if path else MAIN_FILE
        return run_static_checks(
            problem, design.files[MAIN_FILE], filename, checks=checks_for_policy(integrity_policy(problem, cfg), kind)
        )
    if name == "roofline":
        timing = earlier.get("timing")
        d = timing.details if timing is not None else {}
        runtime = mapping(d.get("runtime"))
        work = reference_work([timing]) if timing is not None else None
        tol = tolerances(problem, cfg).get(str((work or {}).get("dtype") or "float32"))
        correct = earlier.get("correctness")
        if correct is not None and correct.details.get("mode") == "calibrated":
            tol = admitted_tolerance(correct.details)
        flushed = bool(runtime.get("l2_flush_bytes"))
        return roofline_result(runtime.get("median_ms"), work, peaks, tol, settings(cfg).roofline_margin, flushed,
                               correct.details if correct is not None else None)
    if name == "kernels":  # the `profile` tool's table
        from stratagem.domains.pytorch.kernel_roofline import kernel_table

        profiled = earlier.get("profile")
        return kernel_table(profiled.details if profiled is not None else {}, peaks)
    raise KeyError(f"no parent validator {name!r}")


SLOW_FACTOR = 10.0
"""The default run limit lets every call of an evaluation take this many times the eager
reference's own time (a candidate that much slower than eager, and the harness's work around
each call), so no honest design times out because its problem is big."""


def harness_calls(problem: Problem, cfg: EvaluationConfig) -> int:
    """Calls of reference-sized work one evaluation makes at most, both programs counted: the
    correctness trials (each with its float64 anchor in the worst case), the randomised and
    off-distribution trials, integrity and shapes, and timing with its warm-ups, estimates
    and every re-timing at its doubled pair count."""
    trials = correctness_trials(problem, cfg)
    t = settings(cfg).timing
    attempts = t.max_retimes + 1
    timed_per_side = sum(max(t.min_reps, min(t.pairs, 10) * 2 ** a) for a in range(attempts))  # PAIRS_MIN: 10
    warm_per_side = attempts * (3 + 5)
    return 3 * trials + 6 + 5 + 8 + 2 * (timed_per_side + warm_per_side)


def compile_timeout_s(problem: Problem, cfg: EvaluationConfig, override: float | None = None) -> float | None:
    """The compile limit: `compile_timeout_s` (the problem's, or the config's), or None when
    the user set a run limit (`--timeout`, the problem's or the config's `timeout_s`) and no
    compile limit: their limit then bounds the whole evaluation, compiles included (a user who
    writes 60 expects 60, whatever the candidate hangs in)."""
    if "compile_timeout_s" in problem.settings:
        return float(problem.settings["compile_timeout_s"])
    if "compile_timeout_s" in cfg.model_fields_set:
        return cfg.compile_timeout_s
    user_run = override is not None or "timeout_s" in problem.settings or "timeout_s" in cfg.model_fields_set
    return None if user_run else cfg.compile_timeout_s


def timeout_s(problem: Problem, cfg: EvaluationConfig, override: float | None = None,
              reference_ms: float | None = None) -> float:
    """The run limit of one evaluation: the user's (`--timeout`, the problem's `timeout_s`,
    or `[evaluation] timeout_s` when set) as given; otherwise the default, raised to fit the
    problem when the eager reference's time is known (`harness_calls` x its time x
    SLOW_FACTOR)."""
    if override is not None:
        return override
    if "timeout_s" in problem.settings:
        return float(problem.settings["timeout_s"])
    if "timeout_s" in cfg.model_fields_set or not reference_ms or reference_ms <= 0:
        return cfg.timeout_s
    return max(cfg.timeout_s, harness_calls(problem, cfg) * reference_ms / 1000.0 * SLOW_FACTOR)


def build_request(
    problem: Problem,
    design: Design | None,
    stages: Sequence[ValidatorSpec],
    cfg: EvaluationConfig,
    baselines: Sequence[str] = (),
    seeds: Sequence[int] | None = None,
    confirm: Sequence[Mapping[str, str]] = (),
    confirm_order: Sequence[str] = (),
) -> EvalRequest:
    n = correctness_trials(problem, cfg)
    timing: Mapping[str, Any] = settings(cfg).timing.model_dump()
    payload = Payload(
        init_seed=new_seed(),
        seeds=list(seeds) if seeds is not None else [new_seed() for _ in range(n)],
        timing_seed=new_seed(),
        tolerances=tolerances(problem, cfg),
        correctness=correctness_rule(problem, cfg),
        off_distribution=problem.settings.get("off_distribution", True),
        timing=dict(timing),
        baselines=list(baselines),
        integrity_seeds=[new_seed() for _ in range(4)],
        shape_variants=shape_variants(problem),
        shape_seed=new_seed(),
        own_kernels=own_kernel_names(design.files[MAIN_FILE]) if design is not None else [],
        gpu_memory_fraction=settings(cfg).gpu_memory_fraction,
        precompiled_headers=settings(cfg).precompiled_headers,
        header_diet=settings(cfg).header_diet,
        split_builds=settings(cfg).split_builds,
        cpu_threads=settings(cfg).cpu_threads,
        confirm=[dict(d) for d in confirm],
        confirm_order=list(confirm_order),
    )
    return EvalRequest(
        request_id=uuid.uuid4().hex,
        domain=NAME,
        **WORKER.fields(stages),
        problem=SourceFile(name=problem.name, source=problem.source),
        files=dict(design.files) if design is not None else {},
        device="cpu",  # replaced by the executor with the slot's device
        judge=design is not None and any(s.name == "correctness" for s in stages),
        payload=payload.model_dump(),
    )


_BUILDS = re.compile(r"\bload_inline\b|\bcpp_extension\b")
"""What a design that builds a C++/CUDA extension names (`prebuild_request`)."""


class Payload(BaseModel):
    """What the PyTorch worker needs besides the envelope (`EvalRequest.payload`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count_work: bool = True
    """Whether the judge counts the reference's work (False: an earlier evaluation did)."""
    init_seed: int
    seeds: list[int]
    """Correctness trial seeds, drawn from OS entropy by the parent."""
    timing_seed: int
    tolerances: dict[str, dict[str, float]]
    off_distribution: bool | float = True
    """The off-distribution correctness trial: on, off, or the input scale to use."""
    correctness: dict[str, Any] = Field(default_factory=dict)
    """The correctness rule: `mode` (`fixed` | `calibrated`), `factor`, `atol_floor`, `ulp_floor`."""
    timing: dict[str, Any]
    baselines: list[str] = Field(default_factory=list)
    integrity_seeds: list[int] = Field(default_factory=list)
    """Seeds of the integrity stage's input sets (warm, fresh, refill, candidate-first)."""
    shape_variants: list[dict[str, int | float]] = Field(default_factory=list)
    """Size-constant overrides for the shapes stage."""
    shape_seed: int = 0
    own_kernels: list[str] = Field(default_factory=list)
    """Names of the candidate's own kernels (`__global__`, Triton `@jit`), for provenance."""
    reference_expect_ms: float | None = None
    """The eager reference's median in this invocation's own baseline, for the stability
    verdict's reference-drift check (None: no check)."""
    gpu_memory_fraction: float | None = None
    """The per-process cap on GPU memory (`[pytorch] gpu_memory_fraction`)."""
    precompiled_headers: bool = True
    """`[pytorch] precompiled_headers`: false turns them off in this worker's builds."""
    header_diet: bool = True
    """`[pytorch] header_diet`: false builds CUDA sources as written."""
    split_builds: bool = True
    """`[pytorch] split_builds`: false builds CUDA sources whole (lean headers first)."""
    cpu_threads: int = 1
    """`[pytorch] cpu_threads`: torch's threads in a CPU worker."""
    confirm: list[dict[str, str]] = Field(default_factory=list)
    """A confirmation block's designs: `id` and `source` (`candidate.py`) each."""
    confirm_order: list[str] = Field(default_factory=list)
    """The order its programs are timed in (design ids, and `compile`)."""


def reference_work(results: Sequence[ValidatorResult]) -> dict[str, Any] | None:
    """The reference's counted work (FLOPs, minimum bytes, dtype) in the timing stage's
    details, where the judge put it: the same for every design of a problem."""
    timing = next((r for r in results if r.name == "timing"), None)
    work = (timing.details if timing is not None else {}).get("work")
    return dict(work) if isinstance(work, Mapping) and "flops" in work else None


def with_work(results: Sequence[ValidatorResult], work: Mapping[str, Any]) -> list[ValidatorResult]:
    """The timing result given the reference's work counted by an earlier evaluation (the
    roofline's input), where this one did not count it."""
    out = []
    for r in results:
        if r.name == "timing" and r.outcome == "passed" and reference_work([r]) is None:
            r = ValidatorResult(r.name, r.outcome, r.reason, r.kind,
                                {**r.details, "work": {**work, "counted": "by an earlier evaluation (cached)"}},
                                r.duration_s)
        out.append(r)
    return out


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_GLOBAL_FN = re.compile(r"__global__\s+(?:[\w:<>,\s*&]+?\s+)?(\w+)\s*\(")


def own_kernel_names(source: str) -> list[str]:
    """Names of the candidate's `__global__` functions and Triton `@jit` kernels (by syntax)."""
    names = set(_GLOBAL_FN.findall(_LAUNCH_BOUNDS.sub(" ", source)))
    try:
        tree = pysyntax.parse(source)
    except SyntaxError:
        return sorted(names)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                attr = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if attr in ("jit", "autotune", "heuristics"):
                    names.add(node.name)
    names.discard("void")
    return sorted(names)


class _Work:
    """The reference's counted work (FLOPs, bytes): the judge counts it once per problem."""

    def of(self, results: Sequence[ValidatorResult]) -> dict[str, Any] | None:
        return reference_work(results)

    def told(self, req: EvalRequest, facts: Mapping[str, Any]) -> EvalRequest:
        payload = Payload.model_validate({**req.payload, "count_work": False})
        return req.model_copy(update={"payload": payload.model_dump()})

    def applied(self, results: Sequence[ValidatorResult], facts: Mapping[str, Any]) -> list[ValidatorResult]:
        return with_work(results, facts)


def prebuild_request(problem: Problem, design: Design, cfg: EvaluationConfig) -> EvalRequest | None:
    """The `prebuild` stage (`worker/prebuild.py`) for a design whose source names torch's
    C++/CUDA extension builder (`load_inline`, `cpp_extension`)."""
    if not _BUILDS.search("\n".join(design.files.values())):
        return None
    return build_request(problem, design, [ValidatorSpec("prebuild")], cfg)


_MODEL = re.compile(r"^class\s+Model\b", re.M)
"""What a KernelBench-format problem file holds (with `get_inputs`, which the loader checks)."""


def candidate_design(source: str, **kwargs: Any) -> Design:
    """A PyTorch candidate whose one file (`MAIN_FILE`) is `source`."""
    return Design(files={MAIN_FILE: source}, **kwargs)


class PyTorchTask(Task):
    """A PyTorch problem under one configuration (`Domain.open`): the module's functions, bound."""

    def validator_graph(self) -> ValidatorGraph:
        return validator_graph(self.problem, integrity_policy(self.problem, self.cfg))

    def run_parent_validator(self, name: str, design: Design, earlier: Mapping[str, ValidatorResult],
                             peaks: Mapping[str, Any] | None, device: str) -> ValidatorResult:
        return run_parent_validator(name, self.problem, design, self.cfg, earlier, peaks, device)

    def build_request(self, design: Design | None, stages: Sequence[ValidatorSpec], baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Mapping[str, str]] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        return build_request(self.problem, design, stages, self.cfg, baselines, seeds, confirm, confirm_order)

    def with_reference_expectation(self, req: EvalRequest, value: float | None) -> EvalRequest:
        """The request with the reference-drift check's expectation set (validated again)."""
        payload = Payload.model_validate({**req.payload, "reference_expect_ms": value})
        return req.model_copy(update={"payload": payload.model_dump()})

    def request_seeds(self, req: EvalRequest) -> tuple[int, ...]:
        return tuple(int(s) for s in req.payload.get("seeds", ()))

    def timeout_s(self, override: float | None = None, reference_ms: float | None = None) -> float:
        return timeout_s(self.problem, self.cfg, override, reference_ms)

    def compile_timeout_s(self, override: float | None = None) -> float | None:
        return compile_timeout_s(self.problem, self.cfg, override)

    def precheck(self, device: str) -> Callable[[str], ValidatorResult]:
        checks = checks_for_policy(integrity_policy(self.problem, self.cfg), "cpu" if device == "cpu" else "cuda")
        return lambda source: run_static_checks(self.problem, source, checks=checks)

    def agent_facts(self) -> dict[str, Any]:
        from stratagem.domains.pytorch.rules import (
            agent_rules,  # the writers' words: not an evaluation's
        )

        problem, cfg = self.problem, self.cfg
        return {"tolerances": tolerances(problem, cfg),
                "correctness_mode": str(correctness_rule(problem, cfg)["mode"]),
                "integrity": integrity_policy(problem, cfg),
                "rules": agent_rules(problem, cfg)}


class PyTorchDomain(Domain):
    """The PyTorch domain behind the `Domain` seam (`domains/base.py`): KernelBench-format
    problems, a ModelNew candidate per design, paired runtime against eager."""

    name = NAME
    objective = Objective("runtime", "ms", "minimize")
    names = BaselineNames("eager", "compile", "torch.compile", ("recipe:compile",), key="eager")
    """The views' words: the reference (eager) and the baseline beside it (torch.compile's
    default mode, `compile` in the records), and the design that is that baseline itself (the
    `compile` recipe: plain torch.compile of the reference)."""
    worker = WORKER

    settings = PyTorchSettings
    baselines = BaselineModes()
    peaks = PyTorchPeaks(CALIBRATE_GRAPH)
    reference_facts = _Work()
    graphs = GRAPHS
    prebuild = staticmethod(prebuild_request)
    export = Export(LOAD_HELPER, EXPORT_NOTE)

    def reference_design(self, reference_source: str, why: str) -> str:
        """The reference problem file as a candidate (`ModelNew = Model`), headed by `why`."""
        header = ("# stratagem: this is the reference itself, not a design: " + why + ".\n"
                  "# Keep using the original program; this file only restates it as a ModelNew.\n\n")
        return header + reference_source.rstrip("\n") + "\n\n\nModelNew = Model\n"

    def claims(self, path: Path) -> bool:
        """A `.py` file that defines a `Model` class (KernelBench's format: the loader says what
        else is missing)."""
        p = Path(path)
        if p.suffix != ".py" or not p.is_file():
            return False
        try:
            return _MODEL.search(p.read_text(encoding="utf-8", errors="replace")) is not None
        except OSError:
            return False

    def load_problem(self, path: str | Path) -> Problem:
        from stratagem.domains.pytorch.problem import load_problem

        return load_problem(path)

    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem:
        from stratagem.domains.pytorch.problem import parse_problem

        return parse_problem(source, name=name, path=path)

    def open(self, problem: Problem, cfg: EvaluationConfig) -> PyTorchTask:
        return PyTorchTask(problem, cfg)

    def describe(self, name: str, details: Mapping[str, Any]) -> str | None:
        from stratagem.domains.pytorch.views import describe

        return describe(name, details)

    def main_file(self, problem: Problem) -> str:
        return MAIN_FILE

    def normal_form(self, files: Mapping[str, str]) -> str | None:
        """The candidate's Python with comments, docstrings, whitespace, local names, the
        names of its extensions and of its module-level functions, classes and extension
        modules normalized (all but `ModelNew`, which the harness looks up), and its C++/CUDA
        strings reduced to their tokens (`core.pysyntax.normal_form`); None for a design of
        several files."""
        if set(files) != {"candidate.py"}:
            return None
        return pysyntax.normal_form(files["candidate.py"], keep=("ModelNew",))

    @property
    def prompts(self):  # -> domains.prompts.PackagePrompts (imported on first use)
        """The PyTorch domain's prompt templates and offline design (`domains/pytorch/prompts/`)."""
        from stratagem.domains.pytorch.prompts import PROMPTS

        return PROMPTS

    def policies(self) -> tuple[DomainPolicy, ...]:
        """`recipes` (`recipes/policy.py`), the default without a model."""
        from stratagem.domains.pytorch.recipes.policy import POLICY

        return (POLICY,)


DOMAIN = PyTorchDomain()
"""The instance the registry (`domains/__init__.py`) hands out for `pytorch` problems."""
