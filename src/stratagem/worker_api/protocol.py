"""Owns the contract between the parent and a worker: EvalRequest and EvalResponse (JSON).

The parent builds requests and validates responses strictly; a response that does not fit
(unknown fields, wrong types, wrong request id, too large) is rejected as malformed and the
candidate gets a failed verdict, never a pass.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stratagem.core.verdict import FailureKind, Outcome, ValidatorResult

PROTOCOL_VERSION = 3
"""2: the request is an envelope; what a domain needs travels in its `payload`. 3: it names the
domain's worker and judge modules (`worker_module`, `judge_module`)."""


class StageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    requires: list[str] = Field(default_factory=list)


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    source: str


class EvalRequest(BaseModel):
    """Everything a worker needs, as an envelope: what every domain shares (ids, stages, the
    problem, the design's files, where to run, the lock, the judge, the modules that run them)
    and the domain's own `payload`, which the domain builds and validates (`domains/<name>/`).
    Plain JSON, no pickles."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    protocol: Literal[3] = PROTOCOL_VERSION
    request_id: str
    domain: str
    worker_module: str
    """The domain's worker module (`Domain.worker.module`), which the worker entry point
    (`evaluation/worker.py`) imports by this name: resolved in the parent, so the worker never
    loads the domain registry (nor pydantic)."""
    judge_module: str | None = None
    """The domain's judge module (`Domain.worker.judge_module`), which the judge entry point
    (`evaluation/judge.py`) imports; None: the domain has no judge (`judge` stays false)."""
    keep_env: list[str] = Field(default_factory=list)
    """Variables of the parent's environment the sandbox passes to this domain's worker besides
    its own allowlist (`Domain.worker.keep_env`; a name ending in `*` is a prefix)."""
    caches: dict[str, str] = Field(default_factory=dict)
    """Variable -> folder name: the worker's compile caches, which the sandbox places in the
    slot's cache folder (`Domain.worker.caches`)."""
    stages: list[StageSpec]
    problem: SourceFile
    files: dict[str, str] = Field(default_factory=dict)
    """The design's files, name -> source (empty for a reference-only request)."""
    device: str
    """The device as the worker sees it (`cpu` or `cuda`; pinned by CUDA_VISIBLE_DEVICES)."""
    timing_lock: str | None = None
    """The device's shared/exclusive lock file (`worker_api/device_lock.py`)."""
    lock_owner: dict[str, Any] = Field(default_factory=dict)
    """Who this worker is to a worker waiting on its exclusive hold (`process`: the pid of the
    stratagem process that asked for the evaluation, `label`: the design or baseline)."""
    timing_cores: list[int] = Field(default_factory=list)
    """CPU cores the worker's timing thread runs on while it times (GPU slots)."""
    reserved_cores: list[int] = Field(default_factory=list)
    """CPU cores reserved for timing on this machine: the worker runs off them otherwise."""
    compile_stage: str | None = None
    """The stage whose time counts against the compile limit, not the run limit (the domain's:
    PyTorch's `load`, where imports and `load_inline`/Triton builds happen)."""
    alone: bool = False
    """Use the device alone: every hold of the device lock is exclusive, so no other worker
    on this machine runs on the device beside this one (an evaluation run again after it ran
    out of memory beside others: `evaluation/submit.py`)."""
    judge: bool = False
    """Record the candidate's deciding outputs, and have the judge (a process that never runs
    candidate code) confirm them after the worker ends (evaluation/judge.py)."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """The domain's own fields (seeds, tolerances, timing settings, ...)."""

    @model_validator(mode="after")
    def _judge_named(self) -> EvalRequest:
        if self.judge and not self.judge_module:
            raise ValueError(f"the request asks for a judge, but domain {self.domain!r} names no judge module")
        return self


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
    work: dict[str, Any] | None = None
    """The reference's FLOPs and minimum bytes (the roofline's input), counted by the judge
    while it waits for the worker, where the candidate cannot reach them."""


class EvalResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    protocol: Literal[1]
    request_id: str
    results: list[ResultModel]
    environment: dict[str, Any]
