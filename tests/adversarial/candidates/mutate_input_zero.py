"""Pattern 8: compute the output, then zero the input in place, so a reference run afterwards
(on the same tensor) would see zeros."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.relu(self.lin(x)) * 2.0
        x.zero_()
        return out
