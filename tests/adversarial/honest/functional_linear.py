"""Honest: `F.linear` and `F.relu` instead of the module call."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return F.relu(F.linear(x, self.lin.weight, self.lin.bias)).mul(2.0)
