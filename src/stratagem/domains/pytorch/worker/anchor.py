"""Owns the float64 anchor: the reference run in float64 on the same inputs and device.

Worker-side only. The anchor is a copy of the reference module (the same parameters and
buffers) cast to float64, called on the inputs cast to float64, with float64 as the default
dtype while it runs, so tensors the reference creates itself are float64 too. Its output is
the best available estimate of the exact result, against which both the eager reference's and
the candidate's errors are measured. Where it cannot be had (an op without a float64 kernel,
a module that cannot be copied, a reference that casts to a lower precision explicitly), the
anchor says why, once, and the caller falls back to the fixed rule.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from stratagem.domains.pytorch.worker import runtime


def _to64(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(torch.float64)
    if isinstance(x, list | tuple):
        return type(x)(_to64(v) for v in x)
    return x


def _low_precision(out: Any) -> torch.dtype | None:
    if isinstance(out, torch.Tensor):
        return out.dtype if out.is_floating_point() and out.dtype != torch.float64 else None
    if isinstance(out, list | tuple):
        return next((d for d in (_low_precision(v) for v in out) if d is not None), None)
    return None


class Anchor:
    """The reference in float64, built on first use."""

    def __init__(self, reference: torch.nn.Module, device: str) -> None:
        self._reference = reference
        self._device = device
        self._model: torch.nn.Module | None = None
        self.unavailable: str | None = None
        """Why there is no anchor (None while one can be computed)."""

    def __call__(self, inputs: Sequence[Any]) -> Any | None:
        """The float64 output for `inputs` (left untouched), or None (see `unavailable`)."""
        if self.unavailable is not None:
            return None
        prev = torch.get_default_dtype()
        try:
            if self._model is None:
                self._model = copy.deepcopy(self._reference).to(torch.float64)
            args = [_to64(x) for x in inputs]
            torch.set_default_dtype(torch.float64)
            with torch.no_grad():
                out = self._model(*args)
            runtime.synchronize(self._device)
        except Exception as e:  # noqa: BLE001 - no float64 kernel, uncopyable module, ...
            self.unavailable = f"the reference does not run in float64: {runtime.one_line(e, 200)}"
            return None
        finally:
            torch.set_default_dtype(prev)
        low = _low_precision(out)
        if low is not None:
            self.unavailable = f"the reference's float64 run returned {low} (it casts to a lower precision itself)"
            return None
        return out
