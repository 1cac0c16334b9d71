"""Honest: a forward hook on its own submodule (not process-wide) and an attribute on its own
output; the harness's hooks and inputs untouched."""

import torch
import torch.nn as nn


def _scale(module, args, output):
    return output * 2.0


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.act = nn.ReLU()
        self.act.register_forward_hook(_scale)

    def forward(self, x):
        out = self.act(self.lin(x))
        out.note = "scaled by a hook"
        return out
