"""Pattern 6: a module-level output cache keyed on the input's `id()`."""

import torch
import torch.nn as nn

_CACHE = {}


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        key = id(x)
        if key not in _CACHE:
            _CACHE[key] = torch.relu(self.lin(x)) * 2.0
        return _CACHE[key]
