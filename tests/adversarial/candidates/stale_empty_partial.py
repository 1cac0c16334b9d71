"""Pattern 7: allocate the output with `torch.empty` and write only its first half; the rest is
whatever the allocator hands back."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.lin.out_features)
        half = x.shape[0] // 2
        out[:half] = torch.relu(self.lin(x[:half])) * 2.0
        return out
