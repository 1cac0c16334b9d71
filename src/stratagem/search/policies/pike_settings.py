"""Owns the settings of the PIKE policies (`[policies.pike-b]`, `[policies.pike-o]`) and of the
red-team attacker built on them (`[policies.redteam]`): their defaults, PIKE's taken from the
paper and the authors' code (docs/pike.md), the PIKE-O ablation presets, and what each policy
sets in the search section when the user did not.

Pydantic only, so the registry can validate a section without importing the policies.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

UNBOUNDED_ITERATIONS = 100_000
"""The iteration limit a PIKE run gets when none is given: the query budget binds first."""

Selector = Literal["top-k", "elite-diverse", "tournament", "roulette"]


class PikeCommon(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    query_budget: int = Field(default=300, ge=1)
    """LLM queries per problem, every query counted (brainstorm and fixes included); it becomes
    `search.max_queries` when that is not set."""
    max_fix_attempts: int = Field(default=5, ge=0)
    """Error-Fixing Agent rounds per failing candidate."""

    def search_defaults(self) -> dict[str, Any]:
        """What the policy sets in `[search]` where the user set nothing: the query budget
        binds, not an iteration count or patience (the paper spends the whole budget)."""
        return {"max_queries": self.query_budget, "iterations": UNBOUNDED_ITERATIONS, "patience": None}


class PikeBSettings(PikeCommon):
    """`[policies.pike-b]`: PIKE-B, the exploit-heavy branching search (paper defaults)."""

    num_branches: int = Field(default=10, ge=1)
    """Ideas from the brainstorm, and so phase 0's queries (one per idea)."""
    queries_per_phase: int = Field(default=10, ge=1)
    """Improvement queries of each later phase."""
    top_k: int = Field(default=4, ge=1)
    """Seeds of each later phase (10 queries over 4 seeds: 3/3/2/2)."""
    brainstorm: bool = True
    """Ask the Initial Brainstorming Agent for ideas (False: the "no IBA" ablation: every
    phase-0 query gets the same generic task)."""
    selector: Selector = "top-k"
    """How a phase's seeds are drawn: `top-k` (the paper's), `elite-diverse`, `tournament` or
    `roulette` (the alternatives in the authors' `query_strategies.py`)."""
    library: Literal["phase", "all"] = "phase"
    """Seeds come from the previous phase's valid solutions (`phase`, the paper's short-term
    library) or from every valid solution so far (`all`)."""
    elite_fraction: float = Field(default=0.3, ge=0.0, le=1.0)
    """`elite-diverse`: the share of queries seeded from the top `top_k`, the rest at random."""
    tournament_size: int = Field(default=3, ge=1)
    distinct_directions: bool = True
    """Slots that improve one seed in one phase each get a distinct direction (the brainstorm's
    ideas, then generic ones), and phase 0 fills branches the brainstorm left without an idea
    with generic directions. False: the paper's identical prompts (and ideas repeated to fill
    the branches), which relies on sampling temperature for variety."""


Preset = Literal["paper", "mut", "mut-npar", "mut-npar-1isl", "mut-npar-1isl-eo", "mut-npar-1isl-eo-sl"]

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "mut": {"template": "mutation"},
    "mut-npar": {"template": "mutation", "parallel_evaluations": 1},
    "mut-npar-1isl": {"template": "mutation", "parallel_evaluations": 1, "num_islands": 1},
    "mut-npar-1isl-eo": {"template": "mutation", "parallel_evaluations": 1, "num_islands": 1,
                         "exploration_ratio": 0.0, "exploitation_ratio": 1.0},
    "mut-npar-1isl-eo-sl": {"template": "mutation", "parallel_evaluations": 1, "num_islands": 1,
                            "exploration_ratio": 0.0, "exploitation_ratio": 1.0, "archive_size": 4},
}
"""PIKE-O's ablation ladder toward PIKE-B (the paper's labels): mutation only; + no parallel
evaluation; + one island; + exploit only; + a short library. A setting given explicitly beside
a preset wins over it."""


class PikeOSettings(PikeCommon):
    """`[policies.pike-o]`: PIKE-O, islands with elite archives and MAP-Elites grids (the
    default configuration of the authors' OpenEvolve fork, September 2025)."""

    preset: Preset = "paper"
    num_islands: int = Field(default=3, ge=1)
    population_size: int = Field(default=25, ge=1)
    archive_size: int = Field(default=12, ge=1)
    exploration_ratio: float = Field(default=0.2, ge=0.0, le=1.0)
    exploitation_ratio: float = Field(default=0.7, ge=0.0, le=1.0)
    """The rest (1 - exploration - exploitation) draws parents uniformly from the population."""
    elite_selection_ratio: float = Field(default=0.2, ge=0.0, le=1.0)
    num_inspirations: int = Field(default=3, ge=0)
    """Programs shown beside the top ones in a crossover prompt."""
    num_top_programs: int = Field(default=3, ge=0)
    migration_interval: int = Field(default=50, ge=1)
    """Generations of an island between migrations."""
    migration_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    parallel_evaluations: int = Field(default=20, ge=1)
    """Children bred at once (each parent drawn from completed programs only)."""
    template: Literal["crossover", "mutation"] = "crossover"
    feature_bins: int = Field(default=10, ge=1)
    """Bins per feature dimension of the MAP-Elites grid (code size, diversity)."""

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") not in (None, "paper"):
            preset = PRESETS.get(str(data["preset"]))
            if preset is not None:
                return {**preset, **data}
        return data

    @model_validator(mode="after")
    def _ratios(self) -> PikeOSettings:
        if self.exploration_ratio + self.exploitation_ratio > 1.0 + 1e-9:
            raise ValueError("exploration_ratio + exploitation_ratio must be at most 1")
        return self


class RedteamSettings(BaseModel):
    """`[policies.redteam]`: the attacker policy (`stratagem redteam`, docs/integrity.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    attempts: int = Field(default=2, ge=1)
    """Attempts asked for at once per iteration (each one query, evaluated, and audited when
    the harness accepts it)."""
    query_budget: int = Field(default=12, ge=1)
    """Queries of the run; it becomes `search.max_queries` when that is not set."""
    corpus: str | None = None
    """The folder each breach is written to as a test fixture (`--corpus`); None: the run
    directory's `breaches/`."""

    def search_defaults(self) -> dict[str, Any]:
        """The query budget binds, not an iteration count or patience (no best to wait for)."""
        return {"max_queries": self.query_budget, "iterations": UNBOUNDED_ITERATIONS, "patience": None}
