"""Pattern 6, keyed on sampled values (found outside the corpus): reuse an output when 16
input values at fixed positions, rounded, were seen before. It hit when the CPU timer rotated
a few input sets and only rescaled them slightly between calls."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self._seen = {}

    def forward(self, x):
        flat = x.reshape(-1)
        idx = torch.linspace(0, flat.numel() - 1, 16).long()
        key = tuple(round(v, 3) for v in flat[idx].tolist())
        out = self._seen.get(key)
        if out is None:
            out = torch.relu(self.lin(x)) * 2.0
            self._seen[key] = out
        return out
