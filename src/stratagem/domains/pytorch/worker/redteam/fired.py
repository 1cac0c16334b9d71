"""Owns what shows that an accepted design's shortcut fired in the red-team audit, beside
the checks that find it wrong (`audit.py`): the state a design keeps between calls outside its
own tensors (`kept_state`: a cache grows, an attribute is rebound to another tensor). The
other signs are the audit's own measurements (outputs served again in `delayed_compare`, a
repeated input served faster in `interleaved_timing`).

Worker-side only.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import torch

from stratagem.domains.pytorch.worker import runtime


@dataclass(frozen=True)
class KeptState:
    """What a design holds outside its own tensors (its parameters and buffers): the attributes
    of its module, of its classes and of each of its modules, each as the tensor it is (by
    identity) or the size of the container it is; scalars and functions are left out (a
    counter is not a cache)."""

    marks: dict[str, tuple[str, int]]

    def changes(self, now: KeptState) -> list[str]:
        """What grew or was rebound to another tensor since this one."""
        out = []
        for name, (kind, mark) in now.marks.items():
            old = self.marks.get(name)
            if kind == "tensor" and old is not None and old != (kind, mark):
                out.append(f"{name} rebound to another tensor")
            elif kind == "container" and (old is None or (old[0] == kind and mark > old[1])):
                out.append(f"{name} grew to {mark} entries" + (f" (from {old[1]})" if old else ""))
        return out


def _mark(value: Any) -> tuple[str, int] | None:
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value))
    if isinstance(value, dict | list | set | tuple | collections.deque):
        return ("container", len(value))
    return None


def kept_state(p: runtime.Programs) -> KeptState:
    assert p.candidate is not None
    owners: list[tuple[str, Any]] = [("module", p.candidate_module)] if p.candidate_module is not None else []
    owners += [(cls.__name__, cls) for cls in {type(m) for m in p.candidate.modules()}
               if p.candidate_module is not None and cls.__module__ == p.candidate_module.__name__]
    owners += [(f"self{'.' if path else ''}{path}", m) for path, m in p.candidate.named_modules()]
    marks: dict[str, tuple[str, int]] = {}
    for label, owner in owners:
        for name, value in vars(owner).items():
            if name.startswith("__") or name in OWN_TENSORS or "hooks" in name:
                continue
            mark = _mark(value)
            if mark is not None:
                marks[f"{label}.{name}"] = mark
    return KeptState(marks)


OWN_TENSORS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                         "_state_dict_pre_hooks", "_load_state_dict_pre_hooks"})
"""A module's own registries (its parameters, buffers and submodules): the design's own tensors."""
