"""Owns the policy registry: every search policy by name, how it is built, whether it needs a
model, and the settings section it owns (`[policies.<name>]` in the TOML, validated by the
policy's own model). `--policy NAME` and `search.policy` choose from it.

The generic policies are listed here; a domain adds its own (`Domain.policies`, e.g. the
PyTorch domain's model-free `recipes`), offered for its problems only, and names the policy a
run of its problems uses without a model (none: such a run needs a model or a named policy).
Builders import their policy lazily, so choosing a model-free policy never imports pydantic-ai.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratagem.config import StratagemConfig
from stratagem.core.problem import Problem
from stratagem.core.search import Policy
from stratagem.domains import get_domain
from stratagem.domains import names as domain_names
from stratagem.domains.base import DomainPolicy
from stratagem.errors import ConfigError
from stratagem.search.policies.pike_settings import (
    PikeBSettings,
    PikeCommon,
    PikeOSettings,
    RedteamSettings,
)


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


class TuneSettings(BaseModel):
    """`[policies.tune]` (docs/tune.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    design: str | None = None
    """The template: a design file declaring its parameters (`--design FILE`); None: the
    problem's reference, when it declares them. The run keeps its text, so a resume uses the
    template the run started with."""
    seed: int | None = None
    """Seeds the sampler (None: `search.seed`)."""
    startup: int = Field(default=5, ge=1)
    """Points drawn at random before TPE models the results (optuna's `n_startup_trials`)."""
    draws: int = Field(default=100, ge=1)
    """Samples one iteration may draw (constraint violations and points already evaluated
    are drawn again) before it takes an untried point at random."""
    penalty: float = 0.0
    """The value a failed or invalid point is told as (the objective is the paired speedup
    over the reference, maximized): worse than every measured point."""

    def search_defaults(self) -> dict[str, Any]:
        """One point per iteration, so `search.iterations` is the evaluation budget; no
        patience (a study spends its budget)."""
        return {"patience": None}


def _tune(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.tune import TunePolicy

    s = ctx.settings if isinstance(ctx.settings, TuneSettings) else TuneSettings()
    return TunePolicy.from_settings(s, ctx.problem, ctx.cfg.search.seed)


def _pike_b(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.pike_b import PikeBPolicy
    from stratagem.search.policies.pike_models import pike_models

    s = ctx.settings if isinstance(ctx.settings, PikeBSettings) else PikeBSettings()
    return PikeBPolicy(ctx.cfg, ctx.problem, ctx.work_dir, pike_models(ctx.cfg, ctx.problem), s)


COMMAND_ONLY_ROLES: dict[str, frozenset[str]] = {"pike-o": frozenset({"mutate", "crossover", "fix"}),
                                                 "redteam": frozenset({"attack"})}
"""Policies every one of whose agents writes code: with `[agents.command]` taking all these
roles they need no model (docs/agents.md)."""


AGENT_ALONE = "pike-o"
"""The policy a coding-agent command runs alone (no model, no --policy): every one of its agents
writes code, so the command plans (by what it writes) and writes."""


def default_note(cfg: StratagemConfig) -> str | None:
    """The line the CLI says when the policy is the coding agent's alone (`AGENT_ALONE`); None
    otherwise."""
    if cfg.policy is not None or cfg.agents.model or cfg.agents.command is None:
        return None
    return (f"no --model: the coding agent runs the search alone with --policy {AGENT_ALONE} (it writes every "
            "design: mutation, crossover, error fixing); give --model for auto or pike-b")


def command_writes_all(cfg: StratagemConfig, policy: str) -> bool:
    """Whether the coding-agent command takes every role `policy` calls (so it needs no model)."""
    c = cfg.agents.command
    roles = COMMAND_ONLY_ROLES.get(policy)
    return c is not None and roles is not None and roles <= set(c.roles)


def _pike_o(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.pike_models import pike_models
    from stratagem.search.policies.pike_o import PikeOPolicy

    s = ctx.settings if isinstance(ctx.settings, PikeOSettings) else PikeOSettings()
    if not ctx.cfg.agents.model and command_writes_all(ctx.cfg, "pike-o"):
        from stratagem.agents.agent_command import no_models

        return PikeOPolicy(ctx.cfg, ctx.problem, ctx.work_dir, no_models(), s)
    return PikeOPolicy(ctx.cfg, ctx.problem, ctx.work_dir, pike_models(ctx.cfg, ctx.problem), s)


def _redteam(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.pike_models import pike_models
    from stratagem.search.policies.redteam.policy import RedteamPolicy
    from stratagem.search.policies.redteam.prompts import offered

    domain = get_domain(ctx.problem.domain)
    if "breach" not in domain.graphs or not offered(domain.name):
        raise ConfigError(f"--policy redteam: the {domain.name} domain has no red-team audit (a `breach` graph and "
                          "an attacker's `redteam` prompt); red-teaming runs on the problems of a domain that has "
                          "them (pytorch, command)")
    s = ctx.settings if isinstance(ctx.settings, RedteamSettings) else RedteamSettings()
    if not ctx.cfg.agents.model and command_writes_all(ctx.cfg, "redteam"):
        from stratagem.agents.agent_command import no_models

        return RedteamPolicy(ctx.cfg, ctx.problem, ctx.work_dir, no_models(), s)
    return RedteamPolicy(ctx.cfg, ctx.problem, ctx.work_dir, pike_models(ctx.cfg, ctx.problem), s)


def _auto(ctx: PolicyContext) -> Policy:
    from stratagem.search.policies.auto import AutoPolicy

    return AutoPolicy.from_config(ctx.cfg, ctx.problem, ctx.work_dir)


REGISTRY: dict[str, PolicySpec] = {  # the generic policies; the domains' are in `specs`
    spec.name: spec for spec in (
        PolicySpec("auto", "AUTO's Strategist, Analyst and Implementors (needs a model)", True, _auto),
        PolicySpec("tune", "Bayesian optimization (optuna's TPE) of a template's parameters, one point per "
                   "iteration (no LLM)", False, _tune, TuneSettings),
        PolicySpec("pike-b", "PIKE-B: brainstormed ideas, then the top 4 solutions improved 3/3/2/2 per phase, "
                   "with error fixing (needs a model)", True, _pike_b, PikeBSettings),
        PolicySpec("pike-o", "PIKE-O: islands, elite archives and MAP-Elites grids, mutation and crossover, "
                   "with error fixing (needs a model)", True, _pike_o, PikeOSettings),
        PolicySpec("redteam", "an attacker that tries to fool the harness; what the harness accepts is audited, and "
                   "every breach becomes a test fixture (`stratagem redteam`; needs a model or --agent-cmd)",
                   True, _redteam, RedteamSettings),
    )
}


def _domain_spec(p: DomainPolicy) -> PolicySpec:
    return PolicySpec(p.name, p.summary, False, lambda ctx: p.build(ctx.cfg, ctx.problem, ctx.on_gpu, ctx.settings),
                      p.settings)


def specs(problem: Problem | None = None) -> dict[str, PolicySpec]:
    """The policies a run may choose: the generic ones and those of `problem`'s domain (of
    every known domain when no problem is given)."""
    out = dict(REGISTRY)
    for name in [problem.domain] if problem is not None else domain_names():
        for p in get_domain(name).policies():
            out.setdefault(p.name, _domain_spec(p))
    return out


def policy_name(cfg: StratagemConfig, problem: Problem | None = None) -> str:
    """The policy in force: the configured one, else `auto` with a model, else `pike-o` for a
    coding-agent command alone (`AGENT_ALONE`), else the problem's domain's model-free default,
    else `tune` when the problem's reference declares a template.

    Raises:
        ConfigError: neither a policy nor a model, and the problem's domain (or, without a
            problem, no domain) names no model-free default.
    """
    if cfg.policy is not None:
        return cfg.policy
    if cfg.agents.command is not None and not cfg.agents.model:
        if command_writes_all(cfg, AGENT_ALONE):
            return AGENT_ALONE
        raise ConfigError(f"a coding-agent command (--agent-cmd, [agents.command]) writes designs for a policy, and "
                          f"its roles leave out some of {AGENT_ALONE}'s ({', '.join(sorted(COMMAND_ONLY_ROLES[AGENT_ALONE]))}): "
                          "give it them, or --model for the other roles of auto (docs/agents.md)")
    if problem is not None:
        domain = get_domain(problem.domain)
        for p in domain.policies():
            if p.model_free_default:
                return p.name
        if _declares_template(problem):
            return "tune"
        where = problem.path or problem.name
        raise ConfigError(
            f"{where} is a {domain.name} problem, and no policy searches one without a model: give --model "
            "(auto, pike-b, pike-o), or --policy tune --design DIR with a design template (docs/tune.md); any "
            f"design can be evaluated with `stratagem eval {where} DESIGN`")
    raise ConfigError("no policy and no model: give --model or --policy (the default without a model is the "
                      "problem's domain's own)")


def _declares_template(problem: Problem) -> bool:
    """Whether the problem's reference declares a template (`tune`'s default without --design)."""
    from stratagem.search.policies.tune import reference_template

    return reference_template(problem) is not None


def spec_for(cfg: StratagemConfig, problem: Problem | None = None) -> PolicySpec:
    """The spec of the policy in force (`policy_name`) for `problem` (any problem when None).

    Raises:
        ConfigError: an unknown name (or another domain's policy), a policy that needs a
            model and has none, or no policy at all (`policy_name`).
    """
    name = policy_name(cfg, problem)
    known = specs(problem)
    spec = known.get(name)
    if spec is None:
        if problem is not None and name in specs():
            raise ConfigError(f"search.policy (--policy): {name!r} is not a policy for a {problem.domain} "
                              f"problem; choose one of {', '.join(known)}")
        raise ConfigError(f"search.policy (--policy): {name!r} is not a policy; choose one of "
                          f"{', '.join(known)}")
    if spec.needs_model and not cfg.agents.model and not command_writes_all(cfg, name):
        raise ConfigError(f"policy `{name}` needs a model: pass --model (e.g. openai:gpt-4.1, "
                          "anthropic:claude-sonnet-4-5, ollama:qwen3, or a name with --endpoint URL)")
    unknown = sorted(set(cfg.policies) - set(specs()))
    if unknown:
        raise ConfigError(f"[policies.{unknown[0]}]: no policy is called {unknown[0]!r}; "
                          f"known: {', '.join(specs())}")
    return spec


def policy_settings(cfg: StratagemConfig, problem: Problem | None = None) -> BaseModel | None:
    """The policy in force's own settings section, validated (None: it takes none).

    Raises:
        ConfigError: see `spec_for`; or settings its model rejects (naming the section).
    """
    spec = spec_for(cfg, problem)
    raw: dict[str, Any] = dict(cfg.policies.get(spec.name) or {})
    if spec.settings is None:
        if raw:
            raise ConfigError(f"[policies.{spec.name}]: the {spec.name} policy takes no settings of its own")
        return None
    try:
        return spec.settings.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise ConfigError(f"[policies.{spec.name}] {where}: {first.get('msg')}") from e


def resolved_config(cfg: StratagemConfig, problem: Problem | None = None) -> StratagemConfig:
    """The configuration a run records and runs with: the policy named (`policy_name`, the
    domain's default when `problem` is given and neither a policy nor a model is; left unnamed
    without a problem), its settings section with every default filled in (so the stored
    config is the full one), and the search settings the policy sets where the user set
    nothing (PIKE: the query budget, no iteration limit, no patience).

    Raises:
        ConfigError: see `policy_settings`.
    """
    if cfg.policy is None and problem is None:
        return cfg  # named when the problem is known (a suite's problems may be of several domains)
    spec = spec_for(cfg, problem)
    if cfg.search.policy is None:
        cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"policy": spec.name})})
    settings = policy_settings(cfg, problem)
    if settings is None:
        return cfg
    policies = {**cfg.policies, spec.name: settings.model_dump(mode="json")}
    search = cfg.search
    if isinstance(settings, PikeCommon | TuneSettings | RedteamSettings):
        given = cfg.search.model_fields_set
        search = search.model_copy(update={k: v for k, v in settings.search_defaults().items() if k not in given})
    return cfg.model_copy(update={"policies": policies, "search": search})


def build_policy(cfg: StratagemConfig, problem: Problem, on_gpu: bool, work_dir: Path) -> Policy:
    """The configured policy, its own settings section validated.

    Raises:
        ConfigError: see `policy_settings`.
    """
    spec = spec_for(cfg, problem)
    return spec.build(PolicyContext(cfg, problem, on_gpu, work_dir, policy_settings(cfg, problem)))
