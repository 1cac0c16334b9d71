"""Pattern 19, a race that passes by luck: every element is off by random noise just under the
absolute tolerance, so each call alone agrees with the reference but two calls on the same
inputs disagree with each other."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.relu(self.lin(x)) * 2.0
        return out + 0.9e-4 * (2.0 * torch.rand_like(out) - 1.0)
