"""Honest: the linear layer as a batched `torch.baddbmm` over a batch of one."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        n = x.shape[0]
        bias = self.lin.bias.expand(1, n, -1)
        y = torch.baddbmm(bias, x.unsqueeze(0), self.lin.weight.t().unsqueeze(0)).squeeze(0)
        return torch.relu(y) * 2.0
