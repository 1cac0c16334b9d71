"""Pattern 6: a module-level output cache keyed on the input's address (`data_ptr`)."""

import torch
import torch.nn as nn

_LAST = []


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        if _LAST and _LAST[0] == x.data_ptr():
            return _LAST[1]
        out = torch.relu(self.lin(x)) * 2.0
        _LAST[:] = [x.data_ptr(), out]
        return out
