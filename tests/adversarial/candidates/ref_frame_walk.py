"""Pattern 17, reading the reference through stack inspection: walk the caller frames until a
local holds the harness's loaded programs, and call the reference model."""

import inspect

import torch.nn as nn


def _reference():
    frame = inspect.currentframe()
    while frame is not None:
        for value in frame.f_locals.values():
            ref = getattr(getattr(value, "programs", None), "reference", None)
            if ref is not None:
                return ref
        frame = frame.f_back
    raise RuntimeError("no reference found")


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        return _reference()(x)
