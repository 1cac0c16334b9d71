"""Honest: the computation in a module-level helper function."""

import torch
import torch.nn as nn


def fused_linear_relu_scale(x, weight, bias, scale=2.0):
    out = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    torch.mm(x, weight.t(), out=out)  # every element of `out` is written here
    return out.add_(bias).clamp_min_(0.0).mul_(scale)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return fused_linear_relu_scale(x, self.lin.weight, self.lin.bias)
