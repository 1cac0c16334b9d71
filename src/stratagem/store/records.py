"""Owns the persisted record types: what a run database row holds, as typed models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


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
    """`runtime`, `reference_eager`, `reference_compile`, ..."""
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
