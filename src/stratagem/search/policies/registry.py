"""Owns the policy registry: every search policy by name, how it is built, whether it needs a
model, and the settings section it owns (`[policies.<name>]` in the TOML, validated by the
policy's own model). `--policy NAME` and `search.policy` choose from it.

Builders import their policy lazily, so choosing `recipes` never imports pydantic-ai.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from stratagem.config import StratagemConfig
from stratagem.core.problem import Problem
from stratagem.core.search import Policy
from stratagem.errors import ConfigError


@dataclass(frozen=True)
class PolicyContext:
    """What a policy is built from."""

    cfg: StratagemConfig
    problem: Problem
    on_gpu: bool
    work_dir: Path
    """Where the policy may keep files of its own (`<run_dir>/work`)."""
    settings: BaseModel | None
    """Its own settings section, validated (None when it declares none)."""


@dataclass(frozen=True)
class PolicySpec:
    name: str
    summary: str
    needs_model: bool
    build: Callable[[PolicyContext], Policy]
    settings: type[BaseModel] | None = None
    """The model of `[policies.<name>]` (None: the policy takes no settings of its own)."""


class RecipesSettings(BaseModel):
    """`[policies.recipes]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    recipes: list[str] | None = None
    """Only these recipe names (None: every one that applies; `search.recipes` is the older
    spelling of the same setting)."""


def _recipes(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.recipes import RecipesPolicy

    s = ctx.settings if isinstance(ctx.settings, RecipesSettings) else RecipesSettings()
    return RecipesPolicy(s.recipes if s.recipes is not None else ctx.cfg.search.recipes, ctx.on_gpu)


def _auto(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.auto import AutoPolicy

    return AutoPolicy.from_config(ctx.cfg, ctx.problem, ctx.work_dir)


REGISTRY: dict[str, PolicySpec] = {
    spec.name: spec for spec in (
        PolicySpec("auto", "AUTO's Strategist, Analyst and Implementors (needs a model)", True, _auto),
        PolicySpec("recipes", "known transformations of the reference, then their best combination (no LLM)",
                   False, _recipes, RecipesSettings),
    )
}


def policy_names() -> list[str]:
    return list(REGISTRY)


def spec_for(cfg: StratagemConfig) -> PolicySpec:
    """The spec of the policy in force.

    Raises:
        ConfigError: an unknown name, or a policy that needs a model and has none.
    """
    name = cfg.policy
    spec = REGISTRY.get(name)
    if spec is None:
        raise ConfigError(f"search.policy (--policy): {name!r} is not a policy; choose one of "
                          f"{', '.join(policy_names())}")
    if spec.needs_model and not cfg.agents.model:
        raise ConfigError(f"policy `{name}` needs a model: pass --model (e.g. openai:gpt-4.1, "
                          "anthropic:claude-sonnet-4-5, ollama:qwen3, or a name with --endpoint URL)")
    unknown = sorted(set(cfg.policies) - set(REGISTRY))
    if unknown:
        raise ConfigError(f"[policies.{unknown[0]}]: no policy is called {unknown[0]!r}; "
                          f"known: {', '.join(policy_names())}")
    return spec


def build_policy(cfg: StratagemConfig, problem: Problem, on_gpu: bool, work_dir: Path) -> Policy:
    """The configured policy, its own settings section validated.

    Raises:
        ConfigError: see `spec_for`; or settings its model rejects (naming the section).
    """
    spec = spec_for(cfg)
    raw: dict[str, Any] = dict(cfg.policies.get(spec.name) or {})
    settings = None
    if spec.settings is not None:
        try:
            settings = spec.settings.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            raise ConfigError(f"[policies.{spec.name}] {where}: {first.get('msg')}") from e
    elif raw:
        raise ConfigError(f"[policies.{spec.name}]: the {spec.name} policy takes no settings of its own")
    return spec.build(PolicyContext(cfg, problem, on_gpu, work_dir, settings))
