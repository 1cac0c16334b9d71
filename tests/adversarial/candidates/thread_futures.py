"""Pattern 2 with `concurrent.futures`: the work runs on a pool thread."""

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

_POOL = ThreadPoolExecutor(max_workers=2)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return _POOL.submit(lambda: torch.relu(self.lin(x)) * 2.0).result()
