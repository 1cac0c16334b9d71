"""Pattern 3: return a torch.Tensor subclass (a lazy/fake tensor would hide work in its
`__torch_function__` or `__eq__`)."""

import torch
import torch.nn as nn


class _Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return (torch.relu(self.lin(x)) * 2.0).as_subclass(_Lazy)
