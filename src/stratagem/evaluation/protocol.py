"""Owns the contract between the parent and a worker: EvalRequest and EvalResponse (JSON).

The parent builds requests and validates responses strictly; a response that does not fit
(unknown fields, wrong types, wrong request id, too large) is rejected as malformed and the
candidate gets a failed verdict, never a pass.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stratagem.core.verdict import FailureKind, Outcome, ValidatorResult

PROTOCOL_VERSION = 1


class StageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    requires: list[str] = Field(default_factory=list)


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    source: str


class CandidateFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    filename: str = "candidate.py"
    source: str


class EvalRequest(BaseModel):
    """Everything a worker needs; plain JSON, no pickles."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    protocol: Literal[1] = PROTOCOL_VERSION
    request_id: str
    domain: str
    stages: list[StageSpec]
    problem: SourceFile
    candidate: CandidateFile | None
    device: str
    """The device as the worker sees it (`cpu` or `cuda`; pinned by CUDA_VISIBLE_DEVICES)."""
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
    timing_lock: str | None = None
    """The device's shared/exclusive lock file (`evaluation/device_lock.py`)."""
    integrity_seeds: list[int] = Field(default_factory=list)
    """Seeds of the integrity stage's input sets (warm, fresh, refill, candidate-first)."""
    shape_variants: list[dict[str, int | float]] = Field(default_factory=list)
    """Size-constant overrides for the shapes stage."""
    shape_seed: int = 0
    own_kernels: list[str] = Field(default_factory=list)
    """Names of the candidate's own kernels (`__global__`, Triton `@jit`), for provenance."""
    timing_cores: list[int] = Field(default_factory=list)
    """CPU cores the worker's timing thread runs on while it times (GPU slots)."""
    reserved_cores: list[int] = Field(default_factory=list)
    """CPU cores reserved for timing on this machine: the worker runs off them otherwise."""
    judge: bool = False
    """Record the candidate's deciding outputs, and have the judge (a process that never runs
    candidate code) confirm them after the worker ends (evaluation/judge.py)."""
    reference_expect_ms: float | None = None
    """The eager reference's median in this invocation's own baseline, for the stability
    verdict's reference-drift check (None: no check)."""


class ResultModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: str
    outcome: Outcome
    reason: str | None
    kind: FailureKind | None
    details: dict[str, Any]
    duration_s: float | None

    def to_result(self) -> ValidatorResult:
        return ValidatorResult(
            name=self.name, outcome=self.outcome, reason=self.reason, kind=self.kind,
            details=self.details, duration_s=self.duration_s,
        )


class JudgeFailure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    stage: str
    kind: FailureKind
    reason: str


class JudgeResponse(BaseModel):
    """What the judge writes: whether the recorded outputs hold, and which it checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    request_id: str
    nonce: str
    """The nonce of the parent's go file: an answer to any other go file is refused."""
    ok: bool
    failures: list[JudgeFailure]
    checked: list[str]
    notes: list[str]
    timings_s: dict[str, float] = {}
    """Seconds of the judge's work after the go file: `judging` (all of it), `records_load`."""


class EvalResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    protocol: Literal[1]
    request_id: str
    results: list[ResultModel]
    environment: dict[str, Any]
