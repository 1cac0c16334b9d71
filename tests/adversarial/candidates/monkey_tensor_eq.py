"""Pattern 4: make every tensor comparison true by rebinding `torch.Tensor.__eq__`."""

import torch
import torch.nn as nn


def _always(self, other):
    return torch.ones((), dtype=torch.bool)


torch.Tensor.__eq__ = _always


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.zeros(x.shape[0], self.dim)
