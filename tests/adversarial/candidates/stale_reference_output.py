"""Cheat (7 stale memory: the reference's freed output): compute nothing and return an
uninitialised tensor of the output's shape. An evaluation that runs the reference first on the
same inputs and frees its output before calling the candidate (KernelBench's loop; any caching
allocator, or glibc's free lists for small blocks) hands that very block back, still holding
the right answer, so the check passes and the call costs one allocation."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.empty(x.shape[0], self.lin.out_features, dtype=x.dtype, device=x.device)
