"""Cheat (13 shape specialisation: a launch grid sized for the visible batch): like a Triton or
CUDA kernel launched over a grid hard-coded for the visible 32 rows (4 blocks of 8, each
masking rows past the end), it needs no grid computation and no bounds beyond the visible
size. Smaller batches are masked and come out right; rows past the 32nd are never written."""

import torch
import torch.nn as nn

BLOCK, GRID = 8, 4  # the visible batch of 32 rows


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        rows = x.shape[0]
        out = torch.empty(rows, self.lin.out_features)
        for program in range(GRID):
            lo, hi = program * BLOCK, min(program * BLOCK + BLOCK, rows)
            if lo < hi:
                out[lo:hi] = torch.relu(self.lin(x[lo:hi])) * 2.0
        return out
