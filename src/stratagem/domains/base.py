"""Owns the Domain seam: what the generic layers (the evaluator, the search loop, the
policies, the agents and the views) may ask of a kind of program being optimised. A domain is
a subclass of `Domain`: a small required core (abstract: a domain that lacks one cannot be
made) and optional capabilities, each None (or, for the agents' two hooks, a plain default)
where the domain lacks it; what is asked of one problem is asked of the `Task` the domain
opens on it (`Domain.open`). Generic code asks whether a capability exists and never reaches
past the class. Each domain lives in a package under `domains/` (or is `register`ed); the
registry (`domains/__init__.py`) finds it by `Problem.domain`, and nothing outside `domains/`
imports a concrete domain.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from stratagem.config import EvaluationConfig, StratagemConfig
from stratagem.core.design import Design
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.objective import Measured, Objective
from stratagem.core.paired import Ratio, Stability
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.worker_api.protocol import EvalRequest, StageSpec

if TYPE_CHECKING:
    # a policy's type, for annotations only: one evaluation loads no search records
    from stratagem.core.search import Policy

Precheck = Callable[[str], ValidatorResult]
"""A design's source -> the static verdict the agents get before spending an evaluation."""


class BaselineRules(Protocol):
    """What a domain's reference baselines (timings of the reference in modes other than as
    written, measured by a worker that loads no design) hold for: the evaluator keys its
    baseline cache by them and asks whether a cached one still holds, naming none of them."""

    @property
    def version(self) -> int:
        """The format of the domain's baseline measurements: bumped when the way they are
        measured changes, so older cached ones are not reused."""
        ...

    @property
    def settings(self) -> Mapping[str, Any]:
        """Everything a baseline's validity depends on besides the hardware and the problem."""
        ...

    @property
    def check_trials(self) -> int:
        """The correctness trials (fresh seeds) each mode gets in the baseline worker."""
        ...

    @property
    def min_limit_s(self) -> float:
        """The least run limit of a baseline worker (building the modes may take minutes)."""
        ...

    def identity(self, environment: Mapping[str, Any]) -> dict[str, Any]:
        """The part of a worker's environment a baseline measured there holds for."""
        ...

    def holds(self, environment: Mapping[str, Any]) -> bool:
        """Whether a baseline measured in `environment` (a cached one, found before any
        worker ran) still holds for the software installed here."""
        ...


@dataclass(frozen=True)
class BaselineNames:
    """How the views name a domain's reference and baselines, as data the domain supplies
    (`Domain.names`), so the views say them without the generic layers naming any."""

    reference: str = "the reference"
    """The reference as written, as the views say it ."""
    compared: str | None = None
    """The baseline the views set beside the reference, in a column of its own: its key in the
    records (`EvaluationRecord.speedups`, a design view's second ratio); None: none."""
    compared_label: str = ""
    """How prose names that baseline (its key when empty)."""
    compared_authors: tuple[str, ...] = ()
    """Authors of designs that are the compared baseline's own recipe (a design's
    `DesignView.author`): such a design is never shown against itself (`search/headline.py`)."""
    key: str = "reference"
    """The reference's key in the records: its entry in `EvaluationRecord.speedups` and
    `reference_ms`, its mode among a baseline's `modes` (each other mode's ratio over it is
    `vs_<key>`), and in a confirmation round's JSON (`vs_<key>`, `<key>_ms`)."""

    @property
    def compared_text(self) -> str:
        return self.compared_label or self.compared or ""


@dataclass(frozen=True)
class DomainPolicy:
    """A search policy a domain brings (PyTorch: `recipes`): the policy registry
    (`search/policies/registry.py`) offers it beside the generic ones, for the domain's
    problems only. It needs no model (the registry's own policies are the ones that do)."""

    name: str
    summary: str
    build: Callable[[StratagemConfig, Problem, bool, BaseModel | None], Policy]
    """(the configuration, the problem, whether designs run on a GPU, its validated
    `[policies.<name>]` section or None) -> the policy."""
    settings: type[BaseModel] | None = None
    """The model of `[policies.<name>]` (None: it takes no settings of its own)."""
    model_free_default: bool = False
    """The policy a run of the domain's problems uses when it names neither a policy nor a
    model (at most one per domain; none: such a run needs one or the other)."""


class Prompts(Protocol):
    """What a domain tells the agents, in words of its own (`Domain.prompts`)."""

    def template(self, name: str) -> str:
        """The text of the prompt template `name`: a role's (`strategist`, `analyst`, `review`,
        `implementor`, `implementor_feedback`), `pike` (the PIKE policies') or `design` (how a
        design and its numbers are shown, the device guidance, the words the views use).
        Markdown split into sections by `<!-- section: NAME -->` lines, each a `string.Template`
        (`context/render.py` fills them; the PyTorch domain's are the reference set)."""
        ...

    def offline_design(self, problem: Problem) -> str:
        """The design the model-free `test` model writes (`agents/offline.py`): the reference
        restated as a valid design, as one text (`core.design.text_files`)."""
        ...


@dataclass(frozen=True)
class WorkerSpec:
    """The domain's worker, as the sandbox and the executors need to know it (`Domain.worker`):
    the modules its request names, the variables of the parent's environment it needs and the
    compile caches it keeps per slot. The domain's `build_request` writes it into the request
    (`EvalRequest.worker_module`, `judge_module`, `keep_env`, `caches`), so the sandbox never
    loads the registry."""

    module: str
    """The module whose `run_request(request, workdir, emit, record_dir=)` runs the domain's
    worker stages in the sandbox (`python -m stratagem.evaluation.worker` imports it by this
    name), so it may import only what a GPU machine has (the standard library, the domain's own
    libraries; no pydantic)."""
    judge_module: str | None = None
    """The module whose `run_judge(request, go, record_dir, workdir, emit)` confirms a worker's
    recorded outputs (`python -P -m stratagem.evaluation.judge`); None: the domain has no judge."""
    keep_env: tuple[str, ...] = ()
    """Variables of the parent's environment the sandbox passes to the worker besides its own
    allowlist (`evaluation/isolation.py`); a name ending in `*` is a prefix."""
    caches: Mapping[str, str] = field(default_factory=dict)
    """Variable -> folder name: a compile cache the worker keeps per slot (the executor's slot
    folder, per host and device; a build worker's own folder)."""
    compile_stage: str | None = None
    """The stage that builds a design (PyTorch: `load`; a command problem: `build`): its time
    counts against `compile_timeout_s` and is what the agents are shown as compile time."""

    def fields(self, stages: Sequence[ValidatorSpec]) -> dict[str, Any]:
        """The request's fields that name the worker and its `stages` (`EvalRequest`): each
        stage keeps the requirements among them, and the compile stage is named when it runs."""
        names = {s.name for s in stages}
        return {"worker_module": self.module, "judge_module": self.judge_module,
                "keep_env": list(self.keep_env), "caches": dict(self.caches),
                "stages": [StageSpec(name=s.name, requires=[r for r in s.requires if r in names]) for s in stages],
                "compile_stage": self.compile_stage if self.compile_stage in names else None}


class Baselines(Protocol):
    """The optional capability of timing the reference in modes other than as written
    (`Domain.baselines`; PyTorch: its compiler's modes), by a worker that loads no design: the
    evaluator measures and caches them and chains a design's speedup over each."""

    graph: tuple[ValidatorSpec, ...]
    """The baseline worker's graph (its `baseline` stage's details hold the modes' timings)."""

    def modes(self, cfg: EvaluationConfig, on_gpu: bool) -> list[str]:
        """The modes a run measures, the reference as written first (never empty)."""
        ...

    def rules(self, problem: Problem, cfg: EvaluationConfig) -> BaselineRules:
        """What `problem`'s cached baselines hold for."""
        ...

    def new_seed(self) -> int:
        """A fresh correctness seed for the baseline worker's checks."""
        ...


class Peaks(Protocol):
    """The optional capability of reading the device's calibrated peaks in a parent validator
    (`Domain.peaks`; PyTorch: the roofline's floor). The evaluator calibrates them once per
    machine and device (`evaluation/peaks.py`) and guards against a calibration the reference
    beats."""

    version: int
    """The format of the peaks (cached ones of another version are measured again)."""
    calibrate_graph: tuple[ValidatorSpec, ...]
    """The calibration worker's graph (its `calibrate` stage's details are the peaks)."""

    def calibration_problem(self) -> Problem:
        """The problem the calibration runs on (only `calibrate_graph` runs: never timed)."""
        ...

    def reads_peaks(self, name: str) -> bool:
        """Whether the parent validator `name` reads the peaks."""
        ...

    def reference_beats_floor(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult) -> str | None:
        """Why a peaks-based verdict proves the peaks wrong (the reference beats it), or None."""
        ...

    def demonstrated(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult,
                     peaks: Mapping[str, Any]) -> dict[str, Any] | None:
        """The peaks raised to what the reference (honest by definition) was measured doing,
        when a calibration still puts it under the floor; None when they cannot be."""
        ...


class ReferenceFacts(Protocol):
    """The optional capability of keeping what a worker measured of the reference alone, a
    property of the problem (`Domain.reference_facts`; PyTorch: its FLOPs and bytes), so no
    later evaluation measures it again."""

    def of(self, results: Sequence[ValidatorResult]) -> dict[str, Any] | None:
        """The facts a worker's results hold, or None."""
        ...

    def told(self, req: EvalRequest, facts: Mapping[str, Any]) -> EvalRequest:
        """The request told that the facts are known (the worker skips measuring them)."""
        ...

    def applied(self, results: Sequence[ValidatorResult], facts: Mapping[str, Any]) -> list[ValidatorResult]:
        """The worker's results with the known facts where the parent validators read them."""
        ...


@dataclass(frozen=True)
class Export:
    """What a design taken away carries (`Domain.export`: `stratagem export`, `best/`)."""

    footer: str
    """Appended to the design's main file."""
    note: str = ""
    """One line for the exported file's header saying what the footer is."""


def measure_paired(verdict: Verdict) -> Measured | None:
    """The measurement of a passed paired `timing` stage (its details: `runtime` and
    `reference` with `median_ms`, `speedup`, `stability`); None when nothing was measured. A
    busy machine's timing has no ratio."""
    r = verdict.result("timing")
    if r is None or r.outcome != "passed":
        return None
    d = r.details
    rt, ref = d.get("runtime"), d.get("reference")
    if not isinstance(rt, Mapping) or not isinstance(rt.get("median_ms"), int | float):
        return None
    ref = ref if isinstance(ref, Mapping) else None
    ref_ms = ref.get("median_ms") if ref is not None else None
    stab = Stability.from_json(d.get("stability"))
    return Measured(float(rt["median_ms"]), float(ref_ms) if isinstance(ref_ms, int | float) else None,
                    None if stab.busy else Ratio.from_json(d.get("speedup")), stab,
                    dict(rt), dict(ref) if ref is not None else None)


class Task(ABC):
    """A domain opened on one problem under one configuration (`Domain.open`): what the
    evaluator, the search and the agents ask of that problem. Whatever the domain derives from
    the problem and the configuration (a parsed spec, the settings that apply) it derives once,
    when it is opened. The core (abstract): `validator_graph`, `run_parent_validator`,
    `build_request`, `timeout_s`, `precheck`; the rest has a plain default."""

    def __init__(self, problem: Problem, cfg: EvaluationConfig) -> None:
        self.problem = problem
        self.cfg = cfg

    @abstractmethod
    def validator_graph(self) -> ValidatorGraph: ...

    @abstractmethod
    def run_parent_validator(self, name: str, design: Design, earlier: Mapping[str, ValidatorResult],
                             peaks: Mapping[str, Any] | None, device: str) -> ValidatorResult:
        """A parent-placed validator, given the results so far (and the device's peaks, for a
        domain with `peaks`) and the physical device the design's worker ran on."""

    @abstractmethod
    def build_request(self, design: Design | None, stages: Sequence[ValidatorSpec], baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Mapping[str, str]] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        """The worker's envelope (with the domain's `worker.fields()`), with the domain's payload
        (`confirm`, `confirm_order`: a confirmation block's designs, id and source each, and
        the order to time them in)."""

    def with_reference_expectation(self, req: EvalRequest, value: float | None) -> EvalRequest:
        """The request told what the reference measured in this invocation's baseline
        (unchanged by default: a worker that expects nothing)."""
        return req

    def request_seeds(self, req: EvalRequest) -> tuple[int, ...]:
        """The seeds a request's checks use (kept with the evaluation); none by default."""
        return ()

    @abstractmethod
    def timeout_s(self, override: float | None = None, reference_ms: float | None = None) -> float:
        """The run limit: the user's when set, else a default that fits the problem (from the
        reference's own time, when known)."""

    def compile_timeout_s(self, override: float | None = None) -> float | None:
        """The compile limit, or None (the default) when the run limit bounds the whole
        evaluation."""
        return None

    @abstractmethod
    def precheck(self, device: str) -> Precheck:
        """The static checks an agent's answer must pass before it is evaluated."""

    def agent_facts(self) -> dict[str, Any]:
        """What the agents are told about how designs are judged (tolerances, correctness
        mode); nothing by default."""
        return {}


class Domain(ABC):
    """A kind of program (a PyTorch module, a CUDA program with a build/run/check recipe).

    The core (abstract, every domain writes it): `name`, `objective`, `names`, `worker`;
    `claims`, `load_problem`, `parse_problem`; `open` (the problem's `Task`: its graph, worker
    requests, limits, static checks and the agents' facts); `describe`; `prompts`,
    `main_file`, `reference_design`. `measure` reads a paired `timing` stage unless overridden.

    Optional capabilities, None where the domain lacks them: `settings`, `baselines`, `peaks`,
    `reference_facts`, `prebuild`, `export`, `written_reference`; `graphs` holds the named graphs it offers (none by default); the agents'
    `normal_form` (None for every design) and `policies` (none) have plain defaults."""

    name: str
    """The registry key, and `Problem.domain` of its problems."""
    objective: Objective
    """What its measurements optimise (runtime in ms, lower is better)."""
    names: BaselineNames
    """How the views name its reference (and the baseline they set beside it)."""
    worker: WorkerSpec
    """Its worker: modules, the environment it needs, its per-slot caches."""

    settings: type[BaseModel] | None = None
    """The model of the domain's own config section (`[<name>]` in the file, carried raw in
    `EvaluationConfig.domains`; the registry validates it with this: `domains.section_settings`,
    `check_sections`); None: the domain takes no settings, and a section of its name is an
    error."""
    baselines: Baselines | None = None
    peaks: Peaks | None = None
    reference_facts: ReferenceFacts | None = None
    graphs: Mapping[str, tuple[ValidatorSpec, ...]] = MappingProxyType({})
    """The graphs the domain offers besides its validator graph, by name (a name it lacks: the
    capability is absent): `confirm`, one block of a confirmation round
    (`Evaluator.confirm_block`); `audit`, the null-model audit of a problem (`stratagem
    audit`); the writers' tools (`check`: build and compare on the hidden inputs, no timing;
    `profile`: where one call's time goes; `search/probes.py`); `breach`, the red-team audit of
    a design the harness accepted, stronger than the harness (`stratagem redteam`)."""
    prebuild: Callable[[Problem, Design, EvaluationConfig], EvalRequest | None] | None = None
    """A request that compiles what a design compiles, run on a CPU worker before the design
    takes a GPU slot (its builds land in the shared build cache); it returns None when the
    design builds nothing."""
    export: Export | None = None
    written_reference: Callable[[Problem], dict[str, str]] | None = None
    """A problem's reference as written, apart from the one the harness builds: a domain whose
    reference may be a template built at its defaults (the command domain) gives the template
    (the report's diff, `tune`'s reference template); None: the reference is built as written."""

    @abstractmethod
    def claims(self, path: Path) -> bool:
        """Whether a problem file or directory at `path` is this domain's, by its content (a
        second domain's problems may share its suffix)."""

    @abstractmethod
    def load_problem(self, path: str | Path) -> Problem: ...

    @abstractmethod
    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem: ...

    @abstractmethod
    def open(self, problem: Problem, cfg: EvaluationConfig) -> Task:
        """The domain opened on `problem` under `cfg`: what is asked of that problem (its graph,
        its requests, its limits, its static checks), derived from it once."""

    def measure(self, verdict: Verdict) -> Measured | None:
        """The typed measurement of a passed timing (None when nothing was measured)."""
        return measure_paired(verdict)

    @abstractmethod
    def describe(self, name: str, details: Mapping[str, Any]) -> str | None:
        """One line for the `eval` view of a passed validator's details (None: nothing beyond
        its reason); the views never read a domain's detail keys themselves."""

    @property
    @abstractmethod
    def prompts(self) -> Prompts:
        """The domain's prompt templates and offline design (`Prompts`)."""

    @abstractmethod
    def main_file(self, problem: Problem) -> str:
        """The file a design written as one text is, when that text names no files
        (`core.design.text_files`)."""

    @abstractmethod
    def reference_design(self, reference_source: str, why: str) -> str:
        """What `best/` holds when no design beats the reference: the reference, as a design."""

    def normal_form(self, files: Mapping[str, str]) -> str | None:
        """A form two designs share when one only restates the other (comments, whitespace,
        local names): the run links such a design to the earlier one's verdict instead of
        evaluating it again. None (the default): every distinct file set is evaluated."""
        return None

    def policies(self) -> Sequence[DomainPolicy]:
        """The search policies of the domain's own (its model-free default among them, if it
        has one); none by default: only the generic ones."""
        return ()

    def documentation(self, problem: Problem) -> dict[str, str]:
        """The problem's own documentation the Analyst searches (path -> text): by default the
        files of a `docs/` folder beside the problem's file (`doc_files`); none without one."""
        return doc_files(Path(problem.path).parent / "docs") if problem.path else {}


DOC_MAX_FILES = 2_000
DOC_MAX_FILE_BYTES = 2_000_000


def doc_files(root: Path, suffixes: frozenset[str] | None = None) -> dict[str, str]:
    """The files under `root` (recursively; hidden ones skipped; only `suffixes` where given, at
    most `DOC_MAX_FILES`, none over `DOC_MAX_FILE_BYTES`) by their path relative to it, as text;
    none when it is no folder."""
    if not root.is_dir():
        return {}
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if len(out) >= DOC_MAX_FILES:
            break
        rel = p.relative_to(root)
        if not p.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if suffixes is not None and p.suffix.lower() not in suffixes:
            continue
        try:
            if p.stat().st_size <= DOC_MAX_FILE_BYTES:
                out[rel.as_posix()] = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return out
