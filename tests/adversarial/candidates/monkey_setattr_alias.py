"""Pattern 4 through an alias and `setattr` with a computed attribute name."""

import torch
import torch.nn as nn

_t = torch
setattr(_t, "all" + "close", lambda *args, **kwargs: True)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.zeros(x.shape[0], self.dim)
