"""Owns configuration: typed sections, TOML files, CLI overrides, and every environment read.

Precedence, lowest first: built-in defaults < TOML file (`--config`) < command-line options.
Unknown keys are errors (`extra='forbid'`). This is the only module that reads `os.environ`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stratagem.errors import ConfigError

BaselineMode = Literal["eager", "compile", "max-autotune", "reduce-overhead"]

DEFAULT_TIMEOUT_S = 120.0
"""Wall-clock limit of one evaluation worker after its candidate is loaded and compiled."""

DEFAULT_COMPILE_TIMEOUT_S = 300.0
"""Wall-clock limit of loading a candidate (imports, load_inline and Triton compiles)."""


class Tolerance(BaseModel):
    """Absolute and relative tolerance for one output dtype (as in `torch.allclose`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


def _default_tolerances() -> dict[str, Tolerance]:
    # KernelBench at HEAD (TorchBench's values): fp32 1e-4, half types 1e-2.
    return {
        "float32": Tolerance(atol=1e-4, rtol=1e-4),
        "float16": Tolerance(atol=1e-2, rtol=1e-2),
        "bfloat16": Tolerance(atol=1e-2, rtol=1e-2),
        "float64": Tolerance(atol=1e-7, rtol=1e-7),
    }


class StabilityConfig(BaseModel):
    """When a timing is `unstable` (see docs/timing.md); fractions, 0.10 = 10%."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ci_max: float = Field(default=0.10, gt=0)
    """The paired speedup's 95% interval may be at most +-this fraction of it."""
    drift_max: float = Field(default=0.15, gt=0)
    """The pair ratios of the first and second half may differ by at most this."""
    cluster_gap: float = Field(default=0.25, gt=0)
    """Two clusters of pair ratios this far apart (each at least a fifth of them): unstable."""
    reference_drift_max: float = Field(default=0.5, gt=0)
    """The reference's median may be at most this far from the run's own baseline of it."""
    one_sided_drift_max: float = Field(default=0.5, gt=0)
    """One program's samples drifting by more than this while the other's hold: unstable."""
    spike_factor: float = Field(default=10.0, gt=1)
    spike_share: float = Field(default=0.05, gt=0, le=1)
    """At least this share of one program's calls taking over `spike_factor` times its median
    (another process took whole calls): unstable."""


class TimingConfig(BaseModel):
    """How candidates and references are timed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    warmup_ms: float = Field(default=50.0, gt=0)
    """Time spent calling the function before measuring (compile/caches/clocks settle)."""
    budget_ms: float = Field(default=500.0, gt=0)
    """Target total timed work per measurement; repetitions = budget / estimated call time."""
    min_reps: int = Field(default=10, ge=1)
    max_reps: int = Field(default=1000, ge=1)
    flush_l2: bool = True
    """On a GPU, overwrite a buffer larger than L2 before every timed call (outside the timing)."""
    sync_mode: Literal["stream", "device"] = "stream"
    """The reported GPU interval. `stream`: start event to an event right after the call on
    the same stream (do_bench's protocol; agrees with it). `device`: to an event recorded
    after a device-wide synchronize, which also counts side-stream work but adds a fixed
    host round trip (~20 us on an H200). Both are always measured and stored."""
    input_sets: int = Field(default=3, ge=1)
    """Distinct input sets rotated across timed calls (fewer if they would not fit in memory)."""
    pairs: int = Field(default=40, ge=2)
    """Block pairs of paired timing: the reference and the candidate alternate this many
    times each (the budget is split over the blocks)."""
    max_retimes: int = Field(default=2, ge=0)
    """An unstable paired timing is measured again at most this many times in its worker,
    each time with twice the budget and the pairs of the attempt before."""
    stability: StabilityConfig = Field(default_factory=StabilityConfig)


class CorrectnessConfig(BaseModel):
    """How outputs are judged (docs/correctness.md).

    `fixed` (KernelBench's rule): |candidate - eager| <= atol + rtol |eager| per element, with
    the per-dtype `tolerances`. `calibrated`: the reference is also run in float64 (the
    anchor), and the candidate passes when its max error against the anchor is at most
    `factor` x eager's own max error against the anchor, plus a floor of `atol_floor` +
    `ulp_floor` units in the last place of the output dtype at the anchor's largest magnitude."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["fixed", "calibrated"] = "fixed"
    factor: float = Field(default=4.0, ge=1.0)
    atol_floor: float = Field(default=0.0, ge=0.0)
    ulp_floor: float = Field(default=2.0, ge=0.0)


class EvaluationConfig(BaseModel):
    """The harness: devices, sandbox limits, correctness and timing settings."""

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
    """Give up on a request no worker answered within this long (None: wait, as a batch
    queue may take hours to start a worker)."""
    queue_capacity: int = Field(default=8, ge=1)
    """Requests a run keeps in the queue at once."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Limit for correctness and timing, once the candidate is loaded (a hang is cut off)."""
    compile_timeout_s: float = Field(default=DEFAULT_COMPILE_TIMEOUT_S, gt=0)
    """Limit for the load stage: process start, imports, CUDA/Triton compiles (~80 s for one
    load_inline extension on an H200 machine)."""
    lock_wait_timeout_s: float = Field(default=3600.0, gt=0)
    """Limit on the time a worker waits for its device's lock (never charged to the
    candidate's own limits): other workers timing or compiling hold it."""
    correctness_trials: int = Field(default=5, ge=1)
    correctness: CorrectnessConfig = Field(default_factory=CorrectnessConfig)
    tolerances: dict[str, Tolerance] = Field(default_factory=_default_tolerances)
    timing: TimingConfig = Field(default_factory=TimingConfig)
    baselines: list[BaselineMode] | None = None
    """Reference modes to time; `None`: eager and compile, plus max-autotune on a GPU."""
    integrity: Literal["lenient", "strict"] = "lenient"
    """`lenient` (AUTO's rule): vendor libraries, torch ops and algebraic simplifications are
    allowed; cheating means faking speed or correctness. `strict` (KernelBench's intent): the
    heavy computation must run in kernels the candidate wrote (checked statically, and on a
    GPU by profiling which kernels ran and disabling the candidate's own)."""
    roofline_margin: float = Field(default=0.5, ge=0, lt=1)
    """A runtime below roofline floor x (1 - margin) is rejected as impossible."""
    network: Literal["deny", "allow"] = "deny"
    """`deny` runs workers in a private network namespace where the OS allows it."""
    memory_limit_gb: float | None = Field(default=None, gt=0)
    """Address-space limit for CPU workers (not applied on GPUs, whose drivers map huge ranges)."""
    gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    """Cap on the GPU memory each worker and its judge may allocate (torch's per-process
    memory fraction of the device), for GPUs shared with other work; None: the whole device.
    A problem that cannot fit under it is reported up front, with the numbers."""
    cpu_slots: int = Field(default=1, ge=1)
    """Concurrent workers when evaluating on the CPU."""
    workers_per_gpu: int = Field(default=2, ge=1)
    """Concurrent workers per GPU: compiles overlap, timing holds a per-GPU lock."""
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
    request_timeout_s: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    """Retries of one request after a timeout, 429, 5xx or connection error."""
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
    """A valid design this many times faster than eager is reviewed before it can become the best."""
    docs_dir: Path | None = None
    """A folder of documentation the Analyst can search (a problem may also ship `docs/`)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> price, overriding the built-in price table."""
    temperature: float | None = None

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
    """At the end of a run, re-time eager, torch.compile and this many of the best designs
    (plus any whose interval overlaps the best's) together in fresh workers, and head the
    run's results with that (`stratagem confirm`; 0: no confirmation round)."""
    confirm_blocks: int = Field(default=3, ge=2)
    """Independent worker processes of a confirmation round (the order rotated in each)."""


class StratagemConfig(BaseModel):
    """The whole configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each policy's own settings section (`[policies.<name>]`), validated by that policy."""

    @property
    def policy(self) -> str | None:
        """The policy in force: the configured one, else `auto` with a model; None without
        either: the problem's domain names its default (`search/policies/registry.py`'s
        `policy_name`)."""
        if self.search.policy is not None:
            return self.search.policy
        return "auto" if self.agents.model else None


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


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
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ConfigError(f"config file not found: {path}") from e
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
    if overrides:
        data = _merge(data, _drop_none(overrides))
    try:
        return StratagemConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe_errors(e, path)) from e


OPTIONS = {
    "evaluation.device": "--device", "evaluation.timeout_s": "--timeout", "evaluation.integrity": "--integrity",
    "evaluation.correctness.mode": "--correctness", "search.policy": "--policy",
    "search.iterations": "--iterations", "search.patience": "--patience", "search.implementors": "--implementors",
    "search.max_queries": "--max-queries", "search.max_tokens": "--max-tokens", "search.max_usd": "--max-usd",
    "search.max_gpu_seconds": "--max-gpu-seconds", "search.max_wall_seconds": "--max-wall-seconds",
    "search.run_dir": "--run-dir", "agents.model": "--model", "agents.endpoints": "--endpoint",
}
"""Config keys set by a command-line option: errors name both."""


def describe_errors(e: ValidationError, path: str | Path | None = None) -> str:
    """One line per invalid value, naming its config key, the option that sets it, what was
    given and what is allowed (never pydantic's raw dump)."""
    lines = []
    for err in e.errors():
        loc = [str(x) for x in err.get("loc", ()) if not str(x).startswith("function-")]
        key = ".".join(loc) or "configuration"
        opt = OPTIONS.get(key)
        name = f"{key} ({opt})" if opt else key
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        given = err.get("input")
        shown = "" if err.get("type") in ("extra_forbidden", "missing") or isinstance(given, dict) or repr(given) in msg \
            else f" (got {given!r})"
        if err.get("type") == "extra_forbidden":
            msg = "unknown setting (check its spelling and section)"
        lines.append(f"{name}: {msg}{shown}")
    where = f" in {path}" if path else ""
    return f"invalid configuration{where}: " + "; ".join(lines)


def _drop_none(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in m.items():
        if isinstance(v, Mapping):
            inner = _drop_none(v)
            if inner:
                out[k] = inner
        elif v is not None:
            out[k] = v
    return out


def cache_dir(cfg: EvaluationConfig) -> Path:
    """Where compile caches, baselines and locks live."""
    if cfg.cache_dir is not None:
        return Path(cfg.cache_dir).expanduser()
    env = os.environ.get("STRATAGEM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stratagem"


def environment() -> dict[str, str]:
    """A snapshot of the process environment, for the sandbox to filter."""
    return dict(os.environ)


def secret(name: str | None) -> str | None:
    """Read one secret (an API key) from the environment; None when unset or unnamed."""
    return os.environ.get(name) if name else None


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge command-line overrides (None values ignored) into a config mapping."""
    return _merge(dict(data), _drop_none(overrides or {}))
