"""Pattern 19: output perturbed by fresh random numbers on every call (1e-2, over tolerance)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.relu(self.lin(x)) * 2.0
        return out + 1e-2 * torch.rand_like(out)
