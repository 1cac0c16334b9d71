"""Honest: in-place ops, but only on buffers this call allocated (never on the input)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        y = torch.mm(x, self.lin.weight.t())
        y.add_(self.lin.bias)
        y.relu_()
        return y.mul_(2.0)
