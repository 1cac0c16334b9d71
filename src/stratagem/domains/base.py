"""Owns the Domain protocol: what the generic layers (the evaluator, the search loop, the
policies and the agents) may ask of a kind of program being optimised. Each domain lives in a
package under `domains/`; the registry (`domains/__init__.py`) finds it by `Problem.domain`,
and nothing outside `domains/` imports a concrete domain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from stratagem.config import EvaluationConfig, StratagemConfig
from stratagem.core.design import Design
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.objective import Measured, Objective
from stratagem.core.problem import Problem
from stratagem.core.search import Policy
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.worker_api.protocol import EvalRequest

Precheck = Callable[[str], ValidatorResult]
"""A design's source -> the static verdict the agents get before spending an evaluation."""


class BaselineRules(Protocol):
    """What a domain's reference baselines (timings of the reference in modes other than as
    written, measured by a worker that loads no design) hold for: the evaluator keys its
    baseline cache by them and asks whether a cached one still holds, naming none of them."""

    version: int
    """The format of the domain's baseline measurements: bumped when the way they are
    measured changes, so older cached ones are not reused."""
    settings: Mapping[str, Any]
    """Everything a baseline's validity depends on besides the hardware and the problem."""
    check_trials: int
    """The correctness trials (fresh seeds) each mode gets in the baseline worker."""
    min_limit_s: float
    """The least run limit of a baseline worker (building the modes may take minutes)."""

    def identity(self, environment: Mapping[str, Any]) -> dict[str, Any]:
        """The part of a worker's environment a baseline measured there holds for."""
        ...

    def holds(self, environment: Mapping[str, Any]) -> bool:
        """Whether a baseline measured in `environment` (a cached one, found before any
        worker ran) still holds for the software installed here."""
        ...


@dataclass(frozen=True)
class BaselineNames:
    """The names of a domain's baselines, as data the domain supplies (`Domain.baseline_names`),
    so the views say them without the generic layers naming any."""

    reference: str = "the reference"
    """The reference as written, as the views say it (`Domain.reference_label`)."""
    compared: str | None = None
    """The baseline the views set beside the reference, in a column of its own: its key in the
    records (`EvaluationRecord.speedups`, a design view's second ratio); None: none."""
    compared_label: str = ""
    """How prose names that baseline (its key when empty)."""
    compared_authors: tuple[str, ...] = ()
    """Authors of designs that are the compared baseline's own recipe (a design's
    `DesignView.author`): such a design is never shown against itself (`search/headline.py`)."""

    @property
    def compared_text(self) -> str:
        return self.compared_label or self.compared or ""


def baseline_names(domain: object) -> BaselineNames:
    """`domain.baseline_names`, or for a domain that declares none, its reference's label
    alone (no compared baseline)."""
    names = getattr(domain, "baseline_names", None)
    if isinstance(names, BaselineNames):
        return names
    return BaselineNames(str(getattr(domain, "reference_label", "") or "the reference"))


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


class Domain(Protocol):
    """A kind of program (a PyTorch module, a CUDA program with a build/run/check recipe).

    Besides these members a domain may declare `baseline_names` (`BaselineNames`: how the views
    name its reference and the baseline they set beside it); the views read it through
    `baseline_names(domain)`, which falls back to `reference_label` alone. Its own config
    section (`[<name>]`, `EvaluationConfig.domains`) it validates itself when it reads it."""

    name: str
    """The registry key, and `Problem.domain` of its problems."""
    reference_label: str
    """What a design's speedup is over, in the views (the first domain's reference mode, or `the reference`)."""
    worker_module: str
    """The module whose `run_request(request, workdir, emit, record_dir=)` runs the domain's
    worker stages in the sandbox: its `build_request` writes the name into the request and the
    worker entry point (`python -m stratagem.evaluation.worker`) imports it, so the module may
    import only what a GPU machine has (the standard library, the domain's own libraries; no
    pydantic)."""
    judge_module: str | None
    """The module whose `run_judge(request, go, record_dir, workdir, emit)` confirms a worker's
    recorded outputs (`python -P -m stratagem.evaluation.judge`), named in the request the same
    way; None: the domain has no judge and never asks for one."""
    objective: Objective
    """What its measurements optimise (PyTorch: runtime in ms, lower is better)."""
    peaks_version: int
    """The format version of the device peaks its parent-side validators read."""
    baseline_graph: tuple[ValidatorSpec, ...]
    calibrate_graph: tuple[ValidatorSpec, ...]
    audit_graph: tuple[ValidatorSpec, ...]
    confirm_graph: tuple[ValidatorSpec, ...]
    """One block of a confirmation round (`Evaluator.confirm_block`); empty: the domain has none."""
    probe_graphs: Mapping[str, tuple[ValidatorSpec, ...]]
    """The writers' tools the domain offers (`check`: build and compare on the hidden inputs, no
    timing; `profile`: where one call's time goes), each the graph the evaluator runs for it; a
    tool it cannot offer is absent (read with `getattr(domain, "probe_graphs", {})`: optional)."""
    export_footer: str
    """Appended to a design taken away (`stratagem export`, `best/`)."""
    export_note: str
    """One line for the exported file's header saying what the footer is ('' for none)."""

    def reference_design(self, reference_source: str, why: str) -> str:
        """What `best/` holds when no design beats the reference: the reference, as a design."""
        ...

    def claims(self, path: Path) -> bool:
        """Whether a problem file at `path` is this domain's."""
        ...

    def load_problem(self, path: str | Path) -> Problem: ...

    def parse_problem(self, source: str, *, name: str, path: str | None = None) -> Problem: ...

    def calibration_problem(self) -> Problem | None:
        """The problem `stratagem calibrate` hands the evaluator to measure the device's peaks
        with (only `calibrate_graph` runs on it: its reference is never timed); None: the domain
        reads no peaks and has nothing to calibrate."""
        ...

    def prebuild_request(self, problem: Problem, design: Design, cfg: EvaluationConfig) -> EvalRequest | None:
        """A request that compiles what `design` compiles, run on a CPU worker before the design
        takes a GPU slot (its builds land in the shared build cache its evaluation then loads
        from); None: nothing to build ahead (the executor then goes straight to the slot)."""
        ...

    def validator_graph(self, problem: Problem, cfg: EvaluationConfig) -> ValidatorGraph: ...

    def run_parent_validator(self, name: str, problem: Problem, design: Design, cfg: EvaluationConfig,
                             earlier: Mapping[str, ValidatorResult], peaks: Mapping[str, Any] | None,
                             device: str) -> ValidatorResult:
        """A parent-placed validator, given the results so far (and the device's peaks)."""
        ...

    def needs_peaks(self, name: str) -> bool:
        """Whether the parent validator `name` reads the device's calibrated peaks."""
        ...

    def reference_beats_floor(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult) -> str | None:
        """Why a peaks-based verdict proves the peaks wrong (the reference beats it), or None."""
        ...

    def demonstrated_peaks(self, earlier: Mapping[str, ValidatorResult], result: ValidatorResult,
                           peaks: Mapping[str, Any]) -> dict[str, Any] | None:
        """The peaks raised to what the reference (honest by definition) was measured doing,
        when a calibration still puts it under the floor; None when they cannot be."""
        ...

    def build_request(self, problem: Problem, design: Design | None, stages: Sequence[ValidatorSpec],
                      cfg: EvaluationConfig, baselines: Sequence[str] = (),
                      seeds: Sequence[int] | None = None, confirm: Sequence[Mapping[str, str]] = (),
                      confirm_order: Sequence[str] = ()) -> EvalRequest:
        """The worker's envelope, with this domain's payload (`confirm`, `confirm_order`: a
        confirmation block's designs, id and source each, and the order to time them in)."""
        ...

    def with_reference_expectation(self, req: EvalRequest, value: float | None) -> EvalRequest:
        """The request told what the reference measured in this invocation's baseline."""
        ...

    def reference_facts(self, results: Sequence[ValidatorResult]) -> dict[str, Any] | None:
        """What a worker's results say about the reference alone (a property of the problem,
        not of the design; PyTorch: its FLOPs and bytes), to be kept and not measured again."""
        ...

    def with_reference_facts(self, req: EvalRequest, facts: Mapping[str, Any]) -> EvalRequest:
        """The request told that the reference's facts are known (the worker and judge skip
        measuring them)."""
        ...

    def apply_reference_facts(self, results: Sequence[ValidatorResult],
                              facts: Mapping[str, Any]) -> list[ValidatorResult]:
        """The worker's results with the known facts where the parent validators read them."""
        ...

    def request_seeds(self, req: EvalRequest) -> tuple[int, ...]: ...

    def new_seed(self) -> int: ...

    def timeout_s(self, problem: Problem, cfg: EvaluationConfig, override: float | None = None,
                  reference_ms: float | None = None) -> float:
        """The run limit: the user's when set, else a default that fits the problem (from the
        reference's own time, when known)."""
        ...

    def compile_timeout_s(self, problem: Problem, cfg: EvaluationConfig, override: float | None = None) -> float | None:
        """The compile limit, or None when a run limit the user set bounds the whole evaluation."""
        ...

    def baselines(self, cfg: EvaluationConfig, on_gpu: bool) -> list[str]:
        """The reference modes a run measures, the reference as written first; empty: the
        domain times its reference beside each design only."""
        ...

    def baseline_rules(self, problem: Problem, cfg: EvaluationConfig) -> BaselineRules | None:
        """What `problem`'s cached baselines hold for (asked only when `baselines` is not
        empty; None: nothing is cached)."""
        ...

    def measure(self, verdict: Verdict) -> Measured | None:
        """The typed measurement of a passed timing (None when nothing was measured)."""
        ...

    def precheck(self, problem: Problem, cfg: EvaluationConfig, device: str) -> Precheck:
        """The static checks an agent's answer must pass before it is evaluated."""
        ...

    def agent_facts(self, problem: Problem, cfg: EvaluationConfig) -> dict[str, Any]:
        """What the agents are told about how designs are judged (tolerances, correctness mode)."""
        ...

    def main_file(self, problem: Problem) -> str:
        """The file a design written as one text is, when that text names no files
        (`core.design.text_files`): PyTorch's `candidate.py`, a command problem's first
        editable file."""
        ...

    def normal_form(self, files: Mapping[str, str]) -> str | None:
        """A form two designs share when one only restates the other (comments, whitespace,
        local names): the run links such a design to the earlier one's verdict instead of
        evaluating it again. None: no such form (every distinct file set is evaluated). Two
        designs with one form must compute the same thing."""
        ...

    @property
    def prompts(self) -> Prompts:
        """The domain's prompt templates and offline design (`Prompts`)."""
        ...

    def policies(self) -> Sequence[DomainPolicy]:
        """The search policies of the domain's own (its model-free default among them, if it
        has one); empty: only the generic ones."""
        ...
