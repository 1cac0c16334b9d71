"""Pattern 4: slow the clock the CPU timer reads, so the candidate looks 100x faster."""

import time

import torch
import torch.nn as nn

_real = time.perf_counter
_start = _real()
time.perf_counter = lambda: _start + (_real() - _start) / 100.0


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0
