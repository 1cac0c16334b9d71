"""Owns the persisted record types: what a run database row holds, as typed models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 7
"""2: the search tables (run, iterations, agent_calls, reviews); 3: `reviews.failed`;
4: `evaluations.speedups` and `evaluations.stability` (paired timing); 5: `design_tags` (a
policy's metadata per design); 6: `policy_state` (a policy's own state: phases, islands);
7: `agent_calls.input_tokens` and `output_tokens` nullable (unknown: the agent reported none;
the 0s of older databases are kept as they were)."""

V = TypeVar("V")

OLD_REFERENCE_KEY = "eager"
"""The key databases written before 2026-12-05 gave the reference's entry in
`EvaluationRecord.speedups` and `reference_ms` whatever the domain (its first domain's word);
since then it is the domain's own (`BaselineNames.key`). `keyed` reads the old ones."""


def keyed(entries: Mapping[str, V], key: str) -> dict[str, V]:
    """A record's `speedups` or `reference_ms` with the reference's entry under the domain's
    `key`: an older database's `OLD_REFERENCE_KEY` entry is renamed (when `key` is absent)."""
    if key in entries or OLD_REFERENCE_KEY not in entries:
        return dict(entries)
    return {key if k == OLD_REFERENCE_KEY else k: v for k, v in entries.items()}


class ProblemRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    domain: str
    path: str | None
    source_hash: str
    """Artifact hash of the problem's source."""


class DesignRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    problem_id: str
    files: dict[str, str]
    """File name -> artifact hash."""
    parent_ids: list[str] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)
    created_at: float


class MeasurementRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    """`runtime`, or `reference_<mode>` for each of the domain's baseline modes."""
    unit: str
    median: float
    q1: float
    q3: float
    samples: list[float]


class EvaluationRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: int | None = None
    design_id: str
    problem_id: str
    status: str
    """`valid`, `invalid` or `error`."""
    device: str
    runtime_ms: float | None
    speedup: float | None
    validators: list[dict[str, Any]]
    """Every validator result (name, outcome, reason, kind, details, duration_s)."""
    environment: dict[str, Any]
    seeds: list[int]
    reference_ms: dict[str, float | None]
    measurements: list[MeasurementRecord] = Field(default_factory=list)
    created_at: float
    speedups: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Baseline mode -> the design's speedup over it: `ratio`, `low`, `high` (95% interval),
    `pairs`, `chained` (`core.paired.Ratio`). `speedup` is the ratio of the reference's entry (its key: the domain's
    `BaselineNames.key`)."""
    stability: dict[str, Any] = Field(default_factory=dict)
    """The timing's stability verdict: `verdict` (`stable` | `unstable` | `busy`), `reasons`, `notes`."""


class RunRecord(BaseModel):
    """The search run a run directory holds (one per directory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    problem_id: str
    policy: str
    config: dict[str, Any]
    """The whole StratagemConfig as JSON, so `resume` continues with the same settings."""
    status: str
    """`running`, `finished` or `interrupted`."""
    stop_reason: str | None = None
    created_at: float
    updated_at: float


class IterationRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    n: int
    """1-based iteration number."""
    status: str
    """`running` (or killed while running), `done`, `interrupted`."""
    context_ids: dict[str, list[str]] = Field(default_factory=dict)
    """Curated context: group (`best`, `worst`, `recent`, `failed`) -> design ids."""
    plan: dict[str, Any] | None = None
    design_ids: list[str] = Field(default_factory=list)
    note: str = ""
    started_at: float
    finished_at: float | None = None


class AgentCallRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: int | None = None
    iteration: int | None
    role: str
    model: str
    prompt_hash: str
    input_tokens: int | None
    """None: unknown (a coding-agent command that reported no usage), never a made-up 0."""
    output_tokens: int | None
    """None: unknown, as `input_tokens`."""
    requests: int
    cost_usd: float | None
    latency_s: float
    retries: int
    ok: bool
    error: str | None
    messages_hash: str
    """Artifact hash of the message history (pydantic-ai JSON)."""
    created_at: float


class ReviewRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    design_id: str
    cheating: bool
    reason: str
    created_at: float
    failed: bool = False
    """The review gave no verdict (its LLM call failed)."""
