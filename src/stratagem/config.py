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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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


class EvaluationConfig(BaseModel):
    """The harness: devices, sandbox limits, correctness and timing settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    device: str = "auto"
    """`auto` (a GPU if one is visible, else the CPU), `cpu`, `cuda` or `cuda:N`."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Limit for correctness and timing, once the candidate is loaded (a hang is cut off)."""
    compile_timeout_s: float = Field(default=DEFAULT_COMPILE_TIMEOUT_S, gt=0)
    """Limit for the load stage: process start, imports, CUDA/Triton compiles (~80 s for one
    load_inline extension on an H200 machine)."""
    correctness_trials: int = Field(default=5, ge=1)
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


class StratagemConfig(BaseModel):
    """The whole configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)


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
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid configuration{where}:\n{e}") from e


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
