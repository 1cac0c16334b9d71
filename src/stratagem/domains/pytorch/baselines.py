"""Owns the PyTorch domain's reference baselines: which modes a run measures (eager, and the
torch.compile modes), what a cached baseline holds for (the device, the torch and CUDA
versions, threads, the timing settings and protocol) and whether one measured under an
earlier torch still holds for the installed one. The evaluator keys its cache and runs the
baseline graph (`graphs.BASELINE_GRAPH`) through these rules (`domains/base.py`'s
`BaselineRules`), naming none of them; `BaselineModes` is the domain's `Baselines` capability
that offers them.
"""

from __future__ import annotations

import importlib.metadata
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratagem.config import EvaluationConfig
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.graphs import BASELINE_GRAPH
from stratagem.domains.pytorch.settings import correctness_rule, settings, tolerances

TIMING_PROTOCOL = 3
"""Bumped whenever the way the worker times changes, so older cached baselines are not reused
(2: fresh input values for every timed call; 3: compiled modes paired with eager)."""

CHECK_TRIALS = 2
"""Correctness trials each compiled baseline gets (the candidates' rule, fresh seeds)."""

COMPILE_LIMIT_S = 600.0
"""The least run limit of a baseline worker: compiling the reference (max-autotune above all)
takes minutes."""

IDENTITY = ("device_name", "device", "torch", "cuda", "threads")
"""The fields of a worker's environment a measured baseline holds for."""


def default_modes(cfg: EvaluationConfig, on_gpu: bool) -> list[str]:
    """The configured baselines (eager always among them), else eager and torch.compile's
    default mode, with max-autotune on a GPU."""
    chosen = settings(cfg).baselines
    if chosen is not None:
        modes = [str(m) for m in chosen]
        return modes if "eager" in modes else ["eager", *modes]
    return ["eager", "compile", "max-autotune"] if on_gpu else ["eager", "compile"]


def torch_version() -> str | None:
    """The installed torch's version, from its metadata (the parent never imports torch)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def same_torch(measured: Any, installed: str | None) -> bool:
    """Whether a baseline measured under torch `measured` (the worker's `torch.__version__`)
    holds for the installed one (its package metadata, read without importing torch). The
    two spell a build differently (`2.11.0+cu130` against `2.11.0`, or no metadata at all
    where torch came with the system), which once made every cached baseline look stale and
    measured again at each evaluation: the release numbers decide, and an unknown one does
    not invalidate."""
    if not isinstance(measured, str) or not installed:
        return True
    return measured.split("+")[0] == installed.split("+")[0]


@dataclass(frozen=True)
class PyTorchBaselines:
    """The PyTorch domain's `BaselineRules` for one problem under one configuration."""

    settings: Mapping[str, Any]
    """The timing settings, the correctness rule and the tolerances the baseline was measured
    and checked under."""
    version: int = TIMING_PROTOCOL
    check_trials: int = CHECK_TRIALS
    min_limit_s: float = COMPILE_LIMIT_S
    installed: str | None = field(default_factory=torch_version)
    """The installed torch's version (read once, when the rules are made)."""

    def identity(self, environment: Mapping[str, Any]) -> dict[str, Any]:
        return {k: environment.get(k) for k in IDENTITY}

    def holds(self, environment: Mapping[str, Any]) -> bool:
        return same_torch(environment.get("torch"), self.installed)


def new_seed() -> int:
    """A fresh seed from OS entropy (48 bits: readable, and valid for torch.manual_seed)."""
    return secrets.randbits(48)


class BaselineModes:
    """The PyTorch domain's `Baselines` capability (`domains/base.py`): eager and torch.compile's
    modes, timed by a worker that loads no design."""

    graph = BASELINE_GRAPH

    def modes(self, cfg: EvaluationConfig, on_gpu: bool) -> list[str]:
        return default_modes(cfg, on_gpu)

    def rules(self, problem: Problem, cfg: EvaluationConfig) -> PyTorchBaselines:
        return PyTorchBaselines({**settings(cfg).timing.model_dump(), "correctness": correctness_rule(problem, cfg),
                                 "tolerances": tolerances(problem, cfg)})

    def new_seed(self) -> int:
        return new_seed()
