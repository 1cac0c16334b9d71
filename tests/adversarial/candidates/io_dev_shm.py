"""Pattern 6 across processes (gpu-mode #160): replay outputs saved in /dev/shm, keyed by a
fingerprint of the input values, with `torch.save`/`torch.load` (no `open` anywhere)."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        key = f"{float(x.sum()):.9e}_{float(x.abs().sum()):.9e}".replace("-", "m")
        path = f"/dev/shm/stratagem_adv_{key}.pt"
        if os.path.exists(path):
            return torch.load(path)
        out = torch.relu(self.lin(x)) * 2.0
        torch.save(out, path)
        return out
