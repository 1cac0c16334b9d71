"""Owns configuration: typed sections, TOML files, CLI overrides, and every environment read.

Precedence, lowest first: built-in defaults < TOML file (`--config`) < command-line options.
Unknown keys are errors (`extra='forbid'`). This is the only module that reads `os.environ`.
"""

from __future__ import annotations

import os
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stratagem.config_keys import DOMAIN_OPTIONS as DOMAIN_OPTIONS
from stratagem.config_keys import (
    MOVED_KEYS,
    ConfigDeprecationWarning,
    describe_errors,
    drop_none,
    line_of,
    merge,
    merge_moved,
    move_keys,
    moved_in,
)
from stratagem.config_keys import OPTIONS as OPTIONS
from stratagem.errors import ConfigError
from stratagem.worker_api.places import cache_root

DEFAULT_TIMEOUT_S = 120.0
"""Wall-clock limit of one evaluation worker after its candidate is loaded and compiled."""

DEFAULT_COMPILE_TIMEOUT_S = 300.0
"""Wall-clock limit of loading a candidate (imports, load_inline and Triton compiles)."""


def busy_guard_on() -> bool:
    """The busy guard's default (a domain's timing settings): on unless `STRATAGEM_BUSY_GUARD=off`
    (the test suite's default: its functional tests must not depend on how loaded the machine
    is; the guard's own tests turn it on)."""
    return os.environ.get("STRATAGEM_BUSY_GUARD", "on") != "off"


def is_domain_section(name: str, value: Any) -> bool:
    """Whether a top-level entry of a config mapping is a domain's own section (`[pytorch]`,
    a plug-in's `[<name>]`): a table that is not one of the configuration's own sections. It
    lands in `EvaluationConfig.domains` as it is; this module knows no domain, so the registry
    checks the section's name and the domain validates its keys (`domains.check_sections`,
    `Domain.settings`), as the policy registry does `[policies.<name>]`."""
    return name not in StratagemConfig.model_fields and isinstance(value, Mapping)


def _lift(data: Mapping[str, Any], strict: bool = False) -> dict[str, Any]:
    """A config mapping with every domain's settings at the top (`[pytorch]`): moved keys out
    of `[evaluation]`, and `evaluation.domains.<name>` (a stored config); so merging a file, a
    stored config and overrides lets the later win. `strict` (one file): a key set at its old
    and its new place differently is an error."""
    out = dict(data)
    ev = out.get("evaluation")
    if not isinstance(ev, Mapping):
        return out
    ev = move_keys(ev)
    domains = dict(ev.pop("domains", None) or {})
    for name in [n for n in domains if n not in StratagemConfig.model_fields]:
        top, old = out.get(name), domains.pop(name)
        if not isinstance(top, Mapping):
            out[name] = old
            continue
        out[name] = merge_moved(name, old, top, strict)
    if domains:
        ev["domains"] = domains
    out["evaluation"] = ev
    return out


class EvaluationConfig(BaseModel):
    """The harness: devices, executors, sandbox limits and caches; each domain's own settings
    (how it judges and times designs) in its section (`domains`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    device: str = "auto"
    """`auto` (a GPU if one is visible, else the CPU), `cpu`, `cuda` or `cuda:N`."""
    executor: Literal["local", "queue", "ray"] = "local"
    """Where workers run: `local` (this machine's slots), `queue` (a shared folder served by
    `stratagem worker --queue DIR` on the GPU hosts: docs/queue.md) or `ray` (a Ray cluster,
    `pip install 'stratagem[ray]'`: docs/scale.md)."""
    ray_address: str | None = None
    """The Ray cluster of `executor = "ray"` (an address; None: the one `RAY_ADDRESS`
    names, else a local cluster started for the run)."""
    ray_actors: int | None = Field(default=None, ge=1)
    """Ray runners (each a node's worker slots) to start; None: one per node. Several on one
    node divide its CPUs (for a CPU cluster) or its GPUs."""
    queue_dir: Path | None = None
    """The queue folder of `executor = "queue"` (`--queue DIR`)."""
    queue_poll_s: float = Field(default=0.5, gt=0)
    """How often the run looks for a response."""
    queue_lease_s: float = Field(default=60.0, gt=0)
    """A claim whose worker stopped renewing it for this long goes back to the queue."""
    queue_wait_s: float | None = Field(default=None, gt=0)
    """How long a run waits on its queue with no sign of a worker (no claim, lease renewal,
    progress or answer in the folder; `--queue-wait`) before it stops cleanly: marked
    interrupted, its requests left queued, exit 75; `stratagem resume` continues it and takes
    the answers that arrived meanwhile. None: no bound (a batch queue may take hours to start
    a worker). Keep it above `queue_lease_s / 4`, how often a busy worker renews its lease."""
    queue_capacity: int = Field(default=8, ge=1)
    """Requests a run keeps in the queue at once."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Limit for correctness and timing, once the candidate is loaded (a hang is cut off)."""
    compile_timeout_s: float = Field(default=DEFAULT_COMPILE_TIMEOUT_S, gt=0)
    """Limit for the load stage: process start, imports, CUDA/Triton compiles (~80 s for one
    load_inline extension on an H200 machine)."""
    build_cache: bool = True
    """Keep built `load_inline` extensions in a cache shared by every evaluation and run of
    this user, keyed by source, flags and toolchain, verified by hash when loaded
    (`domains/pytorch/build/build_cache.py`; docs/timing.md, "Build cache")."""
    build_cache_dir: Path | None = None
    """Where the build cache lives; None: `builds/` under the cache directory (`cache_dir`)."""
    lock_wait_timeout_s: float = Field(default=3600.0, gt=0)
    """Limit on the time a worker waits for its device's lock (never charged to the
    candidate's own limits): other workers timing or compiling hold it."""
    domains: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each domain's own settings section (`[pytorch]` in the file: `domains/pytorch/settings.py`;
    a plug-in's `[<name>]`), carried as written: the registry checks its name and the domain
    validates it (`domains.check_sections`, `Domain.settings`)."""
    network: Literal["deny", "allow"] = "deny"
    """`deny` runs workers in a private network namespace where the OS allows it."""
    memory_limit_gb: float | None = Field(default=None, gt=0)
    """Address-space limit for CPU workers (not applied on GPUs, whose drivers map huge ranges)."""
    cpu_slots: int = Field(default=1, ge=1)
    """Concurrent workers when evaluating on the CPU."""
    workers_per_gpu: int = Field(default=2, ge=1)
    """Concurrent workers per GPU: compiles overlap, timing holds a per-GPU lock."""
    spare_workers: Literal["gpu", "always", "never"] = "gpu"
    """Where each slot's next worker is started ahead (`evaluation/spares.py`): while a request
    runs, a spare process imports the worker's modules (and, on a GPU, makes its CUDA context),
    and the slot's next request of the same kind runs in it. `gpu` (the default): GPU slots
    only (on a CPU machine the spare's import competes with the evaluation for the same cores:
    no gain measured on 2 cores); `always`; `never`. One spare per slot at most; one-shot
    commands (`eval`, `baseline`, `audit`, `calibrate`) start none."""
    prebuild: Literal["when_busy", "always", "never"] = "when_busy"
    """When a design that builds an extension is built first on a CPU build worker
    (`LocalExecutor.prebuild`): `when_busy`, when no slot of its GPU is free at that moment (it
    builds while it would wait; with a free slot it builds in that slot's worker, outside the
    device lock, without a second worker's start); `always`; `never`."""
    max_response_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """A worker response larger than this is rejected as malformed."""
    cache_dir: Path | None = None
    """Compile caches, baseline cache, locks. `None`: `$STRATAGEM_CACHE_DIR` or ~/.cache/stratagem."""

    @field_validator("device")
    @classmethod
    def _check_device(cls, v: str) -> str:
        if v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()):
            return v
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, not {v!r}")

    @model_validator(mode="before")
    @classmethod
    def _moved_to_domains(cls, data: Any) -> Any:
        """Keys that moved to a domain's section (`MOVED_KEYS`), given at their old place."""
        return move_keys(data) if isinstance(data, Mapping) else data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> EvaluationConfig:
        """As pydantic's, with a key that moved to a domain's section (`MOVED_KEYS`) updated
        there (so code written before the move keeps working)."""
        if update and any(k in keys for keys in MOVED_KEYS.values() for k in update):
            moved = move_keys({k: v for k, v in update.items() if k != "domains"})  # an update wins
            base = dict(update.get("domains") or self.domains)
            moved["domains"] = {**base, **{d: {**base.get(d, {}), **sec} for d, sec in moved["domains"].items()}}
            update = moved
        return super().model_copy(update=dict(update) if update else None, deep=deep)


class ContextConfig(BaseModel):
    """What the Strategist sees of earlier designs (AUTO's P best, Q worst, R recent, F failed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    best: int = Field(default=3, ge=0)
    """P: the fastest valid designs."""
    worst: int = Field(default=1, ge=0)
    """Q: the slowest valid designs."""
    recent: int = Field(default=2, ge=0)
    """R: the most recent designs not already chosen."""
    failed: int = Field(default=2, ge=0)
    """F: random failed designs (invalid or error)."""
    token_budget: int = Field(default=16_000, ge=500)
    """Approximate token budget of the rendered context (4 characters per token)."""
    failure_report_chars: int = Field(default=1_200, ge=100)
    """Each failure report is compressed to at most this many characters."""


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)


WriterRole = Literal["implementor", "optimize", "fix", "mutate", "crossover", "attack"]
"""The roles that write designs (AUTO's Implementor; PIKE's optimizer, error fixer, mutation
and crossover): the ones a coding-agent command can take (`agents.command`)."""

WRITER_ROLES: tuple[WriterRole, ...] = ("implementor", "optimize", "fix", "mutate", "crossover", "attack")


class AgentCommandConfig(BaseModel):
    """A coding agent (Claude Code, Codex CLI, ...) run as a command in the writing roles
    (`[agents.command]`, `--agent-cmd`; docs/agents.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cmd: str = Field(min_length=1)
    """The shell command, run in a fresh work directory per call (`sh -c`); its environment is
    stratagem's own (the agent keeps its credentials)."""
    timeout_s: float = Field(default=1800.0, gt=0)
    """Wall-clock limit of one call; past it the command's process group is killed."""
    roles: list[WriterRole] = Field(default_factory=lambda: list(WRITER_ROLES))
    """The writing roles the command takes; the others stay with `agents.model`."""


class AgentsConfig(BaseModel):
    """The LLM side: which model, which endpoints, limits and retries."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str | None = None
    """`openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`, `ollama:qwen3:32b`, `test`, or a bare
    model name served by `endpoints`. None: no LLM (the `recipes` policy)."""
    endpoints: list[str] = Field(default_factory=list)
    """OpenAI-compatible base URLs serving `model` (vLLM, Ollama, ...); several form a pool that
    concurrent agents share."""
    api_key_env: str | None = None
    """Environment variable holding the endpoints' API key (read by config.py only)."""
    request_timeout_s: float = Field(default=900.0, gt=0)
    """One model request's limit: a slow reasoning model may think for minutes before a code
    answer. Past it the request is a timeout (retried, `max_retries`)."""
    preflight_timeout_s: float = Field(default=300.0, gt=0)
    """The limit of the one-line request each remote model gets before a run starts (a
    reasoning model thinks even over one line); past it the run stops with a timeout."""
    max_retries: int = Field(default=4, ge=0)
    """Retries of one request after a timeout, 429, 5xx or connection error (counted apart from
    the query budget: a retry is not a query)."""
    backoff_s: float = Field(default=2.0, ge=0)
    """First retry delay; doubles each retry."""
    output_retries: int = Field(default=2, ge=0)
    """Retries after a malformed answer (schema or static-check failure)."""
    implementor_token_limit: int = Field(default=200_000, ge=1_000)
    """An Implementor's conversation is abandoned (design logged as failed) past this many tokens."""
    implementor_max_attempts: int = Field(default=6, ge=1)
    """Evaluations an Implementor may request before giving up."""
    summarize_after_tokens: int = Field(default=60_000, ge=1_000)
    """The Summarizer compresses a conversation's history past this size."""
    analyst: bool = True
    """Let the Strategist call the Analyst, and review too-good-to-be-true designs."""
    suspicious_speedup: float = Field(default=10.0, gt=1)
    """A valid design this many times faster than the reference is reviewed before it can become the best."""
    docs_dir: Path | None = None
    """A folder of documentation the Analyst can search (a problem may also ship `docs/`)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> price, overriding the built-in price table."""
    temperature: float | None = None
    command: AgentCommandConfig | None = None
    """A coding-agent command that writes designs in place of `model` (`[agents.command]`)."""

    @model_validator(mode="after")
    def _endpoints_need_a_model(self) -> AgentsConfig:
        if self.endpoints and not self.model:
            raise ValueError("agents.endpoints (--endpoint) is set but agents.model (--model) is not: name the "
                             "model the endpoint serves, e.g. --model qwen3:32b")
        return self

    def resolved_endpoints(self) -> list[str]:
        """The endpoints serving `model`: the configured ones, or for `ollama:NAME` without any,
        the local Ollama server ($OLLAMA_BASE_URL, else http://localhost:11434/v1)."""
        if self.endpoints or not (self.model or "").startswith("ollama:"):
            return list(self.endpoints)
        return [os.environ.get("OLLAMA_BASE_URL") or OLLAMA_DEFAULT_URL]


OLLAMA_DEFAULT_URL = "http://localhost:11434/v1"


class SearchConfig(BaseModel):
    """The run loop: policy, iterations, concurrency, budgets and stop rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str | None = None
    """A name from the policy registry (`search/policies/registry.py`: auto, tune, pike-b, pike-o,
    and the problem's domain's own); None: `auto` when a model is configured, else the problem's
    domain's default without a model."""
    iterations: int = Field(default=10, ge=1)
    patience: int | None = Field(default=3, ge=1)
    """Stop after this many iterations without a new best (None: never)."""
    implementors: int = Field(default=2, ge=1)
    max_queries: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_usd: float | None = Field(default=None, ge=0)
    max_gpu_seconds: float | None = Field(default=None, gt=0)
    """Seconds of evaluation (worker) time, on whatever device evaluates."""
    max_wall_seconds: float | None = Field(default=None, gt=0)
    seed: int = 0
    """Seeds the search's own choices (curation's random failures, recipe order)."""
    recipes: list[str] | None = None
    """Restrict the `recipes` policy to these recipe names (None: every one that applies)."""
    run_dir: Path | None = None
    """The run directory (None: `runs/<problem>-<timestamp>` under the current directory)."""
    confirm_top: int = Field(default=5, ge=0)
    """At the end of a run, re-time the reference, the domain's baselines and this many of the
    best designs (plus any whose interval overlaps the best's) together in fresh workers, and
    head the run's results with that (`stratagem confirm`; 0: no confirmation round)."""
    confirm_blocks: int = Field(default=3, ge=2)
    """Independent worker processes of a confirmation round (the order rotated in each)."""
    tune_evaluations: int = Field(default=6, ge=0)
    """Points the loop evaluates when an agent (`auto`'s Implementor, a PIKE writer) returns a
    template instead of a fixed design (docs/tune.md, "Agents hand templates to the tuner"),
    charged to the run's budgets; 0: the template's defaults, evaluated as one design."""


class StratagemConfig(BaseModel):
    """The whole configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each policy's own settings section (`[policies.<name>]`), validated by that policy."""

    @model_validator(mode="before")
    @classmethod
    def _domain_sections(cls, data: Any) -> Any:
        """Top-level domain sections (`[pytorch]`, any table not the configuration's own) into
        `evaluation.domains`."""
        if not isinstance(data, Mapping):
            return data
        for name in MOVED_KEYS:
            if name in data and not isinstance(data[name], Mapping):
                raise ValueError(f"[{name}] must be a section (a table of settings), not {data[name]!r}")
        found = [k for k, v in data.items() if is_domain_section(k, v)]
        if not found:
            return data
        out = {k: v for k, v in data.items() if k not in found}
        ev = move_keys(dict(out.get("evaluation") or {}))
        domains = dict(ev.get("domains") or {})
        for name in found:
            domains[name] = merge_moved(name, domains.get(name) or {}, data[name])
        out["evaluation"] = {**ev, "domains": domains}
        return out

    @property
    def policy(self) -> str | None:
        """The policy in force: the configured one, else `auto` with a model; None without
        either: the problem's domain names its default (`search/policies/registry.py`'s
        `policy_name`)."""
        if self.search.policy is not None:
            return self.search.policy
        return "auto" if self.agents.model else None


def load_config(
    path: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> StratagemConfig:
    """Build the config from defaults, an optional TOML file and CLI overrides.

    Args:
        path: a TOML file with sections such as `[evaluation]`.
        overrides: nested mapping of values from the command line (`None` values are ignored).

    Raises:
        ConfigError: unreadable file, unknown key, or invalid value.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = tomllib.loads(text)
        except FileNotFoundError as e:
            raise ConfigError(f"config file not found: {path}") from e
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
        for key, note in moved_in(data):  # said at the key's line of the file (`FILE:LINE: ...`)
            warnings.warn_explicit(note, ConfigDeprecationWarning, str(path), line_of(text, key))
    try:
        data = _lift(data, strict=True)
        if overrides:
            data = merge(data, _lift(drop_none(overrides)))
        return StratagemConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe_errors(e, path)) from e
    except ValueError as e:  # a key at its old and its new place, differently
        raise ConfigError(f"invalid configuration{f' in {path}' if path else ''}: {e}") from e


def cache_dir(cfg: EvaluationConfig) -> Path:
    """Where compile caches, baselines and locks live (`worker_api.places.cache_root`)."""
    return cache_root(os.environ, cfg.cache_dir)


def build_cache_setting(cfg: EvaluationConfig) -> str:
    """The worker's build cache (`STRATAGEM_BUILD_CACHE`): a folder, or `off`."""
    if not cfg.build_cache:
        return "off"
    return str(Path(cfg.build_cache_dir).expanduser() if cfg.build_cache_dir is not None else cache_dir(cfg) / "builds")


def environment() -> dict[str, str]:
    """A snapshot of the process environment, for the sandbox to filter."""
    return dict(os.environ)


def secret(name: str | None) -> str | None:
    """Read one secret (an API key) from the environment; None when unset or unnamed."""
    return os.environ.get(name) if name else None


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge command-line overrides (None values ignored) into a config mapping (a domain's
    settings given at their old place in either are merged at their new one)."""
    return merge(_lift(data), _lift(drop_none(overrides or {})))
