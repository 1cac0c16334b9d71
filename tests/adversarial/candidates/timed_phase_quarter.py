"""Cheat (3 lazy or partial computation while timed): honest for its first 40 calls (the
correctness, integrity and shape checks make fewer), then it computes a quarter of the rows and
repeats them."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 40:
            return torch.relu(self.lin(x)) * 2.0
        quarter = x[: max(1, x.shape[0] // 4)]
        part = torch.relu(self.lin(quarter)) * 2.0
        return part.repeat(4, 1)[: x.shape[0]]
