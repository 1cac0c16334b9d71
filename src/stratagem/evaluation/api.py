"""Owns the library entry points behind `stratagem eval` and `stratagem baseline`.

Synchronous façades at the API edge over the async evaluator: load files, build the executor
for the configured device, evaluate, and record into a run directory when one is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig, cache_dir, environment
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict
from stratagem.domains import check_sections, get_domain, load_problem, names
from stratagem.errors import CandidateError, ProblemError, read_text
from stratagem.evaluation.executors import make_executor
from stratagem.evaluation.results import Baseline, Evaluation
from stratagem.evaluation.service import Evaluator

DESIGN_FILE_MAX_BYTES = 4 * 1024 * 1024
DESIGN_MAX_FILES = 200
"""A design's files are sources: each at most this size, and this many at most."""


def read_design(path: str | Path, problem: Problem) -> Design:
    """A design given as a path (its content is checked later, by the validators): a file is
    the problem's main file (`Domain.main_file`: PyTorch's `candidate.py`, a command
    problem's first editable file), whatever its own name; a directory is a design's files
    (relative path -> text; hidden ones and links left out).

    Raises:
        CandidateError: missing, not UTF-8 text, over the size limits, or an empty directory.
    """
    p = Path(path)
    if not p.is_dir():
        files = {get_domain(problem.domain).main_file(problem): _design_file(p)}
        return Design(files=files, provenance={"source": "file", "path": str(p)})
    files = {}
    for f in sorted(p.rglob("*")):
        rel = f.relative_to(p)
        if f.is_file() and not f.is_symlink() and not any(part.startswith(".") for part in rel.parts):
            if len(files) == DESIGN_MAX_FILES:
                raise CandidateError(f"{p} holds over {DESIGN_MAX_FILES} files: give the directory of one design's files")
            files[rel.as_posix()] = _design_file(f)
    if not files:
        raise CandidateError(f"the design directory {p} holds no file")
    return Design(files=files, provenance={"source": "file", "path": str(p)})


def _design_file(p: Path) -> str:
    if p.is_file() and p.stat().st_size > DESIGN_FILE_MAX_BYTES:
        raise CandidateError(f"{p}: over {DESIGN_FILE_MAX_BYTES} bytes: a design's files are sources")
    return read_text(p, "design file", CandidateError)


def make_evaluator(cfg: EvaluationConfig) -> Evaluator:
    """An evaluator over the executor the configuration selects (every slot of every device
    it resolves to; each evaluation is stored with the device its worker ran on). Close it
    with `await evaluator.executor.aclose()`.

    Raises:
        ConfigError: a domain section of `cfg` names no domain or is invalid for it.
    """
    check_sections(cfg)
    return Evaluator(cfg, make_executor(cfg, environment()))


def one_shot(cfg: EvaluationConfig) -> EvaluationConfig:
    """`cfg` for a command that runs its requests once (`eval`, `baseline`, `audit`,
    `calibrate`): no worker is started ahead, since no request of the same kind follows."""
    return cfg.model_copy(update={"spare_workers": "never"})


def evaluate_files(
    problem_path: str | Path,
    candidate_path: str | Path,
    cfg: EvaluationConfig,
    *,
    timeout_s: float | None = None,
    run_dir: str | Path | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Evaluation:
    problem = load_problem(problem_path)
    design = read_design(candidate_path, problem)
    evaluation = asyncio.run(make_evaluator(one_shot(cfg)).evaluate(problem, design, timeout_s=timeout_s, on_stage=on_stage))
    if run_dir is not None:
        record(run_dir, evaluation)
    return evaluation


def record(run_dir: str | Path, evaluation: Evaluation) -> int:
    # the store only for --run-dir: one evaluation opens none
    from stratagem.store.sqlite import RunStore

    with RunStore.open(run_dir) as store:
        store.add_problem(evaluation.problem)
        store.add_design(evaluation.problem.id, evaluation.design)
        return store.add_evaluation(evaluation.to_record())


def peaks_domain() -> str:
    """The domain whose problem calibrates the device's peaks: the one that reads them
    (`Domain.peaks`).

    Raises:
        ProblemError: no domain or several read them.
    """
    found = [n for n in names() if get_domain(n).peaks is not None]
    if len(found) != 1:
        raise ProblemError(f"{len(found)} domains read device peaks ({', '.join(found) or 'none'}): calibrate needs one")
    return found[0]


def calibrate_device(cfg: EvaluationConfig, domain: str) -> tuple[dict[str, Any] | None, Path]:
    """Measure this device's peaks again (bandwidth, matmul rates per math mode) and replace
    the cached ones; returns them (None if the calibration failed) and where they live (under
    the host and device of the worker that measured them). The problem they are measured with
    is `domain`'s (`Domain.peaks`).

    Raises:
        ProblemError: `domain` is unknown or has no peaks to calibrate.
    """
    peaks_of = get_domain(domain).peaks
    if peaks_of is None:
        raise ProblemError(f"the {domain} domain reads no device peaks: there is nothing to calibrate")
    problem = peaks_of.calibration_problem()
    evaluator = make_evaluator(one_shot(cfg))

    async def go() -> dict[str, Any] | None:
        return await evaluator.peaks.get(problem, peaks_of, refresh=True)

    peaks = asyncio.run(go())
    env = (peaks or {}).get("environment") or {}
    host = str(env.get("host") or "") or evaluator.executor.host()  # where the worker measured them
    if host is None:  # a remote worker failed to calibrate: no machine to name
        return None, cache_dir(cfg) / "peaks"
    return peaks, evaluator.peaks.path(str(env.get("physical_device") or "") or None, host)


def audit_file(
    problem_path: str | Path, cfg: EvaluationConfig, *, timeout_s: float | None = None
) -> tuple[Problem, Verdict, dict[str, Any]]:
    """Run the domain's null-model audit of a problem file (PyTorch: `domains/pytorch/worker/audit.py`)."""
    problem = load_problem(problem_path)
    evaluator = make_evaluator(one_shot(cfg))

    async def go() -> tuple[Verdict, dict[str, Any]]:
        return await evaluator.audit(problem, timeout_s=timeout_s)

    verdict, env = asyncio.run(go())
    return problem, verdict, env


def baseline_file(
    problem_path: str | Path, cfg: EvaluationConfig, *, refresh: bool = False, timeout_s: float | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> tuple[Problem, Baseline]:
    problem = load_problem(problem_path)
    evaluator = make_evaluator(one_shot(cfg))

    async def go() -> Baseline:
        return await evaluator.baseline(problem, refresh=refresh, timeout_s=timeout_s, on_stage=on_stage)

    return problem, asyncio.run(go())
