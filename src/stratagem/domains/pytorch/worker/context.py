"""Owns what the PyTorch worker's stage modules may use of the worker: `StageContext`, a
narrow typed view (the request, the loaded programs, inputs, guarded calls, the correctness
rule in force, device-lock holds and phases), not the whole `Worker` (issue 25); and its part
the judge's `Referee` offers too (`ReferenceContext`).

Worker-side only. `stages.Worker` is the one implementation; the stage modules (integrity,
audit, provenance, params, memory, timed, confirm) take a `StageContext`, so what they reach
is this list and nothing else, and a test stand-in needs only the members a stage uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch

from stratagem.domains.pytorch.worker import compare, guard, precision, record
from stratagem.domains.pytorch.worker.anchor import Anchor
from stratagem.domains.pytorch.worker.runtime import Programs
from stratagem.worker_api.device_lock import LockWindow, Mode


class ReferenceContext(Protocol):
    """What the judge's checks share with the stages (`referee.Referee`): the request, the
    loaded reference, inputs, guarded reference calls, the correctness rule in force."""

    req: Mapping[str, Any]
    """The request, read-only (candidate code cannot loosen tolerances)."""
    device: str
    programs: Programs | None
    anchor: Anchor | None
    poisoned: str | None
    """Set after a CUDA error: every later stage is skipped."""
    evidence_override: precision.Evidence | None
    """The design's precision evidence where none is watched (a compiled baseline's)."""

    def loaded(self, need_candidate: bool) -> Programs: ...

    def make_inputs(self, p: Programs, seed: int) -> list[Any]: ...

    def call_reference(self, model: torch.nn.Module, inputs: list[Any]) -> Any: ...

    def note_cuda(self, e: BaseException) -> None: ...

    def mode(self) -> str: ...

    def judge(self, ref_out: Any, cand_out: Any, inputs: list[Any],
              report_anchor: bool = True) -> compare.Comparison: ...

    def tolerances(self) -> Mapping[str, Mapping[str, float]]: ...

    def hold(self, mode: Mode) -> AbstractContextManager[None]: ...

    def phase(self, name: str, **about: Any) -> AbstractContextManager[None]: ...


class StageContext(ReferenceContext, Protocol):
    """What a stage reads, calls and sets on the worker that runs it (`stages.Worker`)."""

    workdir: Path
    snapshot: guard.Snapshot
    """Identities of harness functions and global flags before any candidate code ran."""
    recorder: record.Recorder
    """The candidate outputs the judge checks."""
    last_inputs: list[Any] | None
    """The last correctness trial's candidate inputs (the integrity stage refills them)."""
    compiled_state_reset: bool
    """Set by the shapes stage: the candidate's compiled code must compile again."""
    windows: list[LockWindow]
    """Every device-lock hold so far."""

    def fresh_inputs(self, p: Programs, attempt: int = 0) -> Callable[[int], list[Any]]: ...

    def timing_inputs(self, p: Programs) -> list[list[Any]]: ...

    def call_candidate(self, model: torch.nn.Module, inputs: list[Any]) -> Any: ...

    def anchor_wanted(self, trial: int, inputs: list[Any]) -> bool: ...

    def compiling(self) -> AbstractContextManager[None]: ...

    def install_builds(self) -> int: ...
