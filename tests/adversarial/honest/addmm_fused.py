"""Honest: bias add fused into the matmul with `torch.addmm`, then clamp and scale in place."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.addmm(self.lin.bias, x, self.lin.weight.t()).clamp_min_(0.0).mul_(2.0)
