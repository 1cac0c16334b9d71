"""Owns the PyTorch domain's own settings: the `[pytorch]` section of the config file
(correctness trials, the correctness rule, per-dtype tolerances, the baseline modes, the
integrity policy, the roofline margin, the per-process GPU memory cap, the timer's settings
`[pytorch.timing]`), validated here, and
the rules a problem's own `STRATAGEM` declaration overrides them by.

The section reaches the domain inside the evaluation settings (`EvaluationConfig.domains`,
filled from `[pytorch]` by `config.py`). Configs written before the section existed kept
these keys in `[evaluation]`; `config.py` moves them here (with a deprecation message for a
file), so none is lost.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratagem.config import EvaluationConfig, busy_guard_on, describe_errors
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.graphs import IntegrityPolicy
from stratagem.errors import ConfigError

SECTION = "pytorch"
"""The section's name in the config file and in `EvaluationConfig.domains`."""

BaselineMode = Literal["eager", "compile", "max-autotune", "reduce-overhead"]


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


CorrectnessMode = Literal["reference", "fixed", "calibrated"]
DEFAULT_FACTOR = {"reference": 1.5, "calibrated": 4.0, "fixed": 1.5}
"""`factor` when none is set, per mode."""


class CorrectnessConfig(BaseModel):
    """How outputs are judged (docs/correctness.md).

    `reference` (the default): precision judged by what ran, then KernelBench's check against
    eager with the per-dtype `tolerances`, and where it fails, a second look against the
    reference run in float64 (the anchor). The design's operators, Triton kernels and own
    native code are watched as the reference's are: a design that computed below the
    reference's precision (fp16 or bf16 where the reference ran TF32 or float32) is a
    precision downgrade, rejected whatever its error. Seen at the reference's precision or
    higher, its max error against float64 may be `same_precision_factor` (3) x eager's own
    (its largest across the trials) plus the floor: another algorithm at the same precision
    rounds differently (honest TF32 designs of KernelBench's ResNet block: 1.57-1.78x on an
    H100). Where its precision cannot be seen (its own CUDA code), `factor` (1.5) x.
    `fixed`: the check against eager only (KernelBench's rule exactly). `calibrated`: the
    anchor alone decides, every trial, with no tolerance: the max error against it at most
    `factor` x eager's plus a floor of `atol_floor` + `ulp_floor` units in the last place of
    the output dtype at the anchor's largest magnitude (the floor applies under `reference`
    too)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: CorrectnessMode = "reference"
    factor: float | None = Field(default=None, ge=1.0)
    """None: 1.5 under `reference`, 4 under `calibrated` (DEFAULT_FACTOR)."""
    same_precision_factor: float = Field(default=3.0, ge=1.0)
    """Under `reference`: the factor for a design seen computing at the reference's precision."""
    atol_floor: float = Field(default=0.0, ge=0.0)
    ulp_floor: float = Field(default=2.0, ge=0.0)


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


class BusyConfig(BaseModel):
    """When the machine is too busy to time (docs/timing.md, "A busy machine"): every timing is
    judged in windows of wall time; a window in which the timing thread waited for a CPU, the
    hypervisor took the cores, or another process used the GPU is void and timed again."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = Field(default_factory=busy_guard_on)
    """On unless set false here or `STRATAGEM_BUSY_GUARD=off` (`config.busy_guard_on`)."""
    window_ms: float = Field(default=50.0, gt=0)
    """Length of a judged window (whole block pairs: a window ends after the pair that fills it)."""
    wait_s: float = Field(default=30.0, ge=0)
    """Time a timing may spend on void windows and the pauses after them; when it runs out with
    fewer than half the timing's pairs quiet, the design is `not measured: the machine was busy`."""
    run_delay_max: float = Field(default=0.05, gt=0, le=1)
    """A window is busy when the timing thread waited for a CPU more than this share of it."""
    steal_max: float = Field(default=0.25, gt=0, le=1)
    """... or the hypervisor stole more than this share of the timing's cores."""
    gpu_other_max: float = Field(default=5.0, ge=0)
    """... or other processes kept the GPU's SMs busier than this (percent, NVML's samples)."""


class TimingConfig(BaseModel):
    """`[pytorch.timing]`: how designs and references are timed (docs/timing.md)."""

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
    target_halfwidth: float = Field(default=0.02, ge=0)
    """A paired timing stops before `pairs` once its interval's half-width is at most this
    fraction of its ratio and every stability check passes (looked at after 10 pairs, then at
    each doubling; docs/timing.md, "Stopping early"); 0: always time every pair."""
    max_retimes: int = Field(default=2, ge=0)
    """An unstable paired timing is measured again at most this many times in its worker,
    each time with twice the budget and the pairs of the attempt before."""
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    busy: BusyConfig = Field(default_factory=BusyConfig)


class PyTorchSettings(BaseModel):
    """`[pytorch]`: how the PyTorch domain judges and times designs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    correctness_trials: int = Field(default=5, ge=1)
    """Correctness trials on fresh random inputs (seeds the design cannot know)."""
    correctness: CorrectnessConfig = Field(default_factory=CorrectnessConfig)
    tolerances: dict[str, Tolerance] = Field(default_factory=_default_tolerances)
    """Per output dtype, for the `fixed` rule."""
    baselines: list[BaselineMode] | None = None
    """Reference modes to time; `None`: eager and compile, plus max-autotune on a GPU."""
    integrity: IntegrityPolicy = "lenient"
    """`lenient` (AUTO's rule): vendor libraries, torch ops and algebraic simplifications are
    allowed; cheating means faking speed or correctness. `strict` (KernelBench's intent): the
    heavy computation must run in kernels the candidate wrote (checked statically, and on a
    GPU by profiling which kernels ran and disabling the candidate's own)."""
    roofline_margin: float = Field(default=0.5, ge=0, lt=1)
    """A runtime below roofline floor x (1 - margin) is rejected as impossible."""
    gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    """Cap on the GPU memory each worker and its judge may allocate (torch's per-process
    memory fraction of the device), for GPUs shared with other work; None: the whole device.
    A problem that cannot fit under it is reported up front, with the numbers."""
    precompiled_headers: bool = True
    """Build a `load_inline` extension's C++ part with torch's precompiled `torch/extension.h`
    where torch supports it (GPU workers and their CPU build workers); false: every build
    parses the headers (the `STRATAGEM_BUILD_PCH=0` environment variable does the same)."""
    header_diet: bool = True
    """Compile a `load_inline` CUDA source with lean headers first, then `torch/types.h`, then as
    written, until one compiles (docs/timing.md, "Build cache"; the same calls, one build);
    false: as written only (`STRATAGEM_BUILD_HEADER_DIET=0` does the same)."""
    cpu_threads: int = Field(default=1, ge=1)
    """Threads torch (and OpenMP) may use in a CPU worker, the same for the reference, the
    baselines and every design (docs/timing.md, "A busy machine"). One by default: with
    several, a thread pool on a shared machine waits at every barrier, which slows code of many
    small ops tens of times more than one fused kernel, so the ratio followed the load; a
    CPU ratio is the speedup on one core. Raise it to time multi-threaded code on a machine
    of your own."""
    timing: TimingConfig = Field(default_factory=TimingConfig)
    split_builds: bool = True
    """Before the lighter headers, build a `load_inline` CUDA source split in two: its kernels
    compiled by nvcc without torch's headers, its host code with the C++ part against torch's
    precompiled header (docs/timing.md, "Split builds"); false: not split. Off with
    `header_diet = false` too."""


def settings(cfg: EvaluationConfig) -> PyTorchSettings:
    """The `[pytorch]` section of `cfg`, validated once per distinct section (one request asks
    for it a dozen times: the graph, the limits, the payload, the parent validators).

    Raises:
        ConfigError: a key the section does not have, or an invalid value (naming `pytorch.KEY`).
    """
    return _validated(json.dumps(cfg.domains.get(SECTION) or {}, sort_keys=True, default=str))


@functools.lru_cache(maxsize=64)
def _validated(section: str) -> PyTorchSettings:
    try:
        return PyTorchSettings.model_validate(json.loads(section))
    except ValidationError as e:
        raise ConfigError(describe_errors(e, prefix=SECTION)) from e


def with_settings(cfg: EvaluationConfig, **changes: Any) -> EvaluationConfig:
    """`cfg` with these `[pytorch]` settings changed (validated)."""
    section = {**dict(cfg.domains.get(SECTION) or {}), **changes}
    out = cfg.model_copy(update={"domains": {**cfg.domains, SECTION: section}})
    settings(out)  # validates
    return out


def integrity_policy(problem: Problem, cfg: EvaluationConfig) -> IntegrityPolicy:
    """The problem's own declaration wins over the run's setting."""
    return problem.settings.get("integrity", settings(cfg).integrity)  # type: ignore[no-any-return]


def tolerances(problem: Problem, cfg: EvaluationConfig) -> dict[str, dict[str, float]]:
    """Per dtype: the run's tolerances, with the problem's declared ones winning."""
    out = {k: {"atol": v.atol, "rtol": v.rtol} for k, v in settings(cfg).tolerances.items()}
    for dtype, tol in dict(problem.settings.get("tolerances", {})).items():
        out[str(dtype)] = {"atol": float(tol["atol"]), "rtol": float(tol["rtol"])}
    return out


def correctness_rule(problem: Problem, cfg: EvaluationConfig) -> dict[str, Any]:
    """The correctness mode and its parameters: the run's, with the problem's declaration
    (`STRATAGEM = {"correctness": "calibrated"}` or a dict of the fields) winning."""
    rule: dict[str, Any] = settings(cfg).correctness.model_dump()
    declared = problem.settings.get("correctness")
    if isinstance(declared, str):
        rule["mode"] = declared
    elif isinstance(declared, Mapping):
        rule.update({"mode": "calibrated", **dict(declared)})
    if rule.get("factor") is None:
        rule["factor"] = DEFAULT_FACTOR.get(str(rule["mode"]), 2.0)
    return rule


def correctness_trials(problem: Problem, cfg: EvaluationConfig) -> int:
    return int(problem.settings.get("correctness_trials", settings(cfg).correctness_trials))
